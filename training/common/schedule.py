"""The learning-rate schedule both stacks use, written once.

Linear warmup from 0 to the peak over `warmup_steps`, then cosine decay to
`end` at `total_steps`; `step` counts optimizer updates from 0. The TPU stack
turns it into an Optax schedule, the GPU stack into a torch LambdaLR factor,
so both see the same learning rate at every update.
"""

import math


def learning_rate(step, peak, warmup_steps, total_steps, end=0.0):
    if warmup_steps > 0 and step < warmup_steps:
        return peak * step / warmup_steps
    decay_steps = max(total_steps - warmup_steps, 1)
    progress = min(max(step - warmup_steps, 0) / decay_steps, 1.0)
    return end + (peak - end) * 0.5 * (1.0 + math.cos(math.pi * progress))
