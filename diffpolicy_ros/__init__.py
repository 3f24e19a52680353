"""diffpolicy_ros: a diffusion-policy actor for robot arms, fine-tuned with PPO in MuJoCo, served over ROS 2."""

# MuJoCo reads MUJOCO_GL when it is first imported; choosing the headless backend here, in the package
# root, guarantees it happens before any of our modules imports mujoco.
from diffpolicy_ros.headless_gl import select_gl_backend as _select_gl_backend

_select_gl_backend()

__version__ = "0.1.0"
