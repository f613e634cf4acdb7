#!/usr/bin/env bash
# Bazel's workspace status (.bazelrc): the source commit, labelled into images.
# A tree with uncommitted changes is marked "-dirty"; outside git, "unknown".
commit="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
if [[ "$commit" != unknown ]] && ! git diff --quiet HEAD -- 2>/dev/null; then
  commit="$commit-dirty"
fi
echo "STABLE_GIT_COMMIT $commit"
