"""A preempted VM's SIGTERM, remembered until the training loop can checkpoint.

    preemption = preemption_lib.Preemption(agree=any_process)
    ...
    if preemption.stop():   # after a step: save, record `preempted`, exit
        ...

On GKE a preempted node's pod gets SIGTERM, its Job fails and the JobSet then
sends SIGTERM to every other pod while they are still saving the same step or
already exiting. Once a process knows it stops for a preemption it ignores
further SIGTERMs: the checkpoint it writes and the exit status it chose (143
on a JobSet) must not be cut short by a second request for the same thing.
Python's handler would not protect the very end of an exit: the interpreter
restores the default action of a handled signal as it finalizes, so a SIGTERM
then ends the process by the signal (-15) instead of its own status. Ignoring
survives that, and Kubernetes' SIGKILL after the grace period still bounds it.
"""

import signal


class Preemption:
    """`agree` makes the answer collective when several processes must save
    together: it maps this process's flag to whether any process was asked."""

    def __init__(self, agree=None):
        self.requested = False
        self._agree = agree
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum, frame):
        del signum, frame
        self.requested = True

    def stop(self):
        """Whether this process (or, with `agree`, any) was asked to stop; from a
        True answer on, this process ignores SIGTERM."""
        stopping = self._agree(self.requested) if self._agree else self.requested
        if stopping:
            try:
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
            except OSError:
                # CPython reports a SIGTERM still pending as the action changed
                # ("ignored due to race condition") once it is SIG_IGN: nothing to do.
                pass
        return bool(stopping)
