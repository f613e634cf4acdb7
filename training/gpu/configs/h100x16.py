"""Gemma 4 31B LoRA SFT on 2 nodes of 8 x H100 80GB (a3-highgpu-8g x 2): one
torchrun per node, 16 processes, FSDP2 full shard as h100x2.py.

The recipe's effective batch of 8 does not split over 16 GPUs: one row per GPU
per optimizer step makes it 16 (half the steps over the same data). The nodes
share the run directory as a mounted file system (--shared_fs): on GKE,
//training/gpu:k8s mounts the --workdir bucket with Cloud Storage FUSE.
"""

from training.gpu.configs import h100x2


def get_config():
    c = h100x2.get_config()
    c.machine = "gpu-h100x16"
    c.num_processes = 16
    c.batch.effective_size = 16
    return c
