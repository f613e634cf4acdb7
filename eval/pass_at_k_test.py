from absl.testing import absltest

from eval import pass_at_k


class PassAtKTest(absltest.TestCase):

    def test_hand_computed_values(self):
        # 1 - C(n-c, k) / C(n, k), worked out by hand.
        cases = [
            (5, 0, 1, 0.0),
            (5, 5, 5, 1.0),
            (5, 1, 1, 1 / 5),                      # 1 - 4/5
            (5, 2, 1, 2 / 5),                      # 1 - C(3,1)/C(5,1) = 1 - 3/5
            (5, 2, 2, 1 - 3 / 10),                 # C(3,2)=3, C(5,2)=10
            (5, 1, 5, 1.0),                        # n - c < k
            (5, 3, 3, 1.0),                        # n - c = 2 < 3
            (10, 3, 5, 1 - 21 / 252),              # C(7,5)=21, C(10,5)=252
            (20, 1, 10, 1 - 92378 / 184756),       # C(19,10)/C(20,10) = 1/2
        ]
        for n, c, k, want in cases:
            with self.subTest(n=n, c=c, k=k):
                self.assertAlmostEqual(pass_at_k.pass_at_k(n, c, k), want, places=12)

    def test_pass_at_1_is_the_pass_fraction(self):
        for c in range(6):
            self.assertAlmostEqual(pass_at_k.pass_at_k(5, c, 1), c / 5, places=12)

    def test_invalid_arguments(self):
        for n, c, k in [(5, 6, 1), (5, -1, 1), (5, 1, 0), (5, 1, 6)]:
            with self.subTest(n=n, c=c, k=k), self.assertRaises(ValueError):
                pass_at_k.pass_at_k(n, c, k)

    def test_mean_over_problems(self):
        counts = {"a": (5, 0), "b": (5, 1), "c": (5, 5)}
        got = pass_at_k.mean_pass_at_k(counts, [1, 5])
        self.assertEqual(set(got), {"1", "5"})
        self.assertAlmostEqual(got["1"], (0 + 0.2 + 1) / 3)
        self.assertAlmostEqual(got["5"], (0 + 1 + 1) / 3)
        self.assertEqual(pass_at_k.mean_pass_at_k({}, [1]), {})

    def test_reported_ks(self):
        self.assertEqual(pass_at_k.ks_for(5), [1, 5])
        self.assertEqual(pass_at_k.ks_for(5, [3, 2, 7, 0]), [1, 2, 3, 5])
        self.assertEqual(pass_at_k.ks_for(1), [1])


if __name__ == "__main__":
    absltest.main()
