"""The pinned base images, by the key `project_image(base = ...)` takes.

`label` is the repository MODULE.bazel's `oci.pull` creates (a local stand-in
offline, WORKSPACE); `image` is what it pulls, recorded in the image labels;
`versions` are labelled too. //tests:repository_pins_test checks every `image`
against MODULE.bazel. The training images use the Python base for both stacks: PyPI's
CUDA torch brings its own CUDA 13 user-space libraries (train_gpu_lock.txt), and
no CUDA base image carries CPython 3.11.
"""

BASES = {
    "python": {
        "image": "docker.io/library/python@sha256:9bffe4353b925a1656688797ebc68f9c525e79b1d377a764d232182a519eeec4",
        "label": "@python_base_linux_amd64",
        "versions": {"python": "3.11.13"},
    },
    "vllm_openai": {
        "image": "docker.io/vllm/vllm-openai@sha256:61fc8a896b0a4fbbbdc063bc4b0dbc25ce98e02b5050c24aeb7830ac02039b14",
        "label": "@vllm_openai_linux_amd64",
        "versions": {"vllm": "0.28.0"},
    },
    "vllm_tpu": {
        "image": "docker.io/vllm/vllm-tpu@sha256:19a1a0526476f902eb83e1057f3d8938f35b457dd7716a30e9ab4f7bee90d507",
        "label": "@vllm_tpu_linux_amd64",
        "versions": {"vllm": "0.29.1rc1.dev468+g0b7f11a1e"},
    },
}
