"""Headless OpenGL backend selection for MuJoCo's offscreen renderer.

MuJoCo picks its GL backend from ``MUJOCO_GL`` when ``mujoco`` is first imported; the package root calls
:func:`select_gl_backend` so that happens before any of our modules imports ``mujoco``. EGL (Mesa's
llvmpipe on a CPU-only machine) is the fastest headless choice; OSMesa is the fallback. A user's explicit
setting always wins.
"""

from __future__ import annotations

import ctypes.util
import os


def select_gl_backend() -> str:
    """Set ``MUJOCO_GL``/``PYOPENGL_PLATFORM`` for headless rendering unless the user set them."""
    if "MUJOCO_GL" not in os.environ:
        if ctypes.util.find_library("EGL"):
            os.environ["MUJOCO_GL"] = "egl"
        elif ctypes.util.find_library("OSMesa"):
            os.environ["MUJOCO_GL"] = "osmesa"
        else:
            os.environ["MUJOCO_GL"] = "egl"  # fails with a clear MuJoCo error only if images are requested
    os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])
    return os.environ["MUJOCO_GL"]
