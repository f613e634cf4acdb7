"""Offline stand-in for @rules_python//python:defs.bzl.

The BUILD files load py_* rules from rules_python in both modes; offline, the
native rules of Bazel 4.2.3 do the work, with a bare interpreter and the
packages of each target's own deps (see //third_party/offline:repositories.bzl).
"""

py_binary = native.py_binary
py_library = native.py_library
py_runtime = native.py_runtime
py_test = native.py_test
