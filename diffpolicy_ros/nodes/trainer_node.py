"""trainer_node: the trainer beside the graph — BC pre-training, then PPO fine-tuning (same code as
``diffpolicy train-bc`` and ``diffpolicy train-ppo``).

It records expert demonstrations in its own sim (unless given a dataset; with both cameras when the policy
reads them), behaviour-clones the policy, then fine-tunes it with PPO in its own vectorized CPU sim workers
(``ppo_env_steps`` > 0). On ``/trainer/checkpoint`` (latched) it announces an early unevaluated BC checkpoint
(``first_checkpoint_iter``: the arm moves within minutes), then each one whose evaluation beats every one
announced before, so the policy node hot-reloads only better policies. Services ``~/pause``,
``~/resume``, ``~/save``; progress on ``/diagnostics``. Training runs in its own thread; callbacks only flip
events.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import rclpy
import torch
from diagnostic_msgs.msg import DiagnosticStatus
from rclpy.node import Node
from std_msgs.msg import String
from std_srvs.srv import Trigger

from diffpolicy_ros.assets import config_file
from diffpolicy_ros.contract import CHECKPOINT_TOPIC
from diffpolicy_ros.nodes.common import LATCHED_QOS, Diagnostics, ParameterError, checked_device, run_node
from diffpolicy_ros.nodes.graph import OBS_DEFAULTS
from diffpolicy_ros.rl.hooks import TrainHooks
from diffpolicy_ros.runs import new_run_dir

DEFAULTS = OBS_DEFAULTS["multimodal"]  # what the node trains when not told, as sim_train's default obs


class TrainerNode(Node):
    def __init__(self):
        super().__init__("trainer_node")
        self.declare_parameter("config", "")  # default: the multimodal policy (cameras, proprio, text)
        self.declare_parameter("demos", "")  # a dataset; empty: record demo_episodes with the expert
        self.declare_parameter("demo_episodes", DEFAULTS.demo_episodes)
        self.declare_parameter("task", "push")
        self.declare_parameter("run_dir", "")
        self.declare_parameter("device", "auto")
        self.declare_parameter("iters", DEFAULTS.iters)
        self.declare_parameter("eval_every", DEFAULTS.eval_every)  # BC iterations between evaluations (+ checkpoint)
        self.declare_parameter("first_checkpoint_iter", 50)  # an early, unevaluated one: the arm moves soon
        self.declare_parameter("eval_episodes", DEFAULTS.eval_episodes)
        self.declare_parameter("ppo_config", "")  # default: DEFAULTS.ppo_config
        self.declare_parameter("ppo_env_steps", DEFAULTS.ppo_env_steps)  # 0: BC only (the graph sizes it by obs)
        self.declare_parameter("ppo_envs", DEFAULTS.ppo_envs)  # PPO sim workers (they share the CPU with the graph)
        self.declare_parameter("torch_threads", 1)  # share the CPU with the sim and the policy node
        g = {
            n: self.get_parameter(n).value
            for n in (
                "config",
                "demos",
                "demo_episodes",
                "task",
                "run_dir",
                "device",
                "iters",
                "eval_every",
                "first_checkpoint_iter",
                "eval_episodes",
                "ppo_config",
                "ppo_env_steps",
                "ppo_envs",
            )
        }
        # the trainer needs the simulator; imported here so every node module imports on a robot PC without one
        from diffpolicy_ros.rl.bc import load_bc_run
        from diffpolicy_ros.rl.ppo import load_ppo_run

        self.run_dir = Path(g["run_dir"] or new_run_dir("sim_train"))
        self.run = load_bc_run(g["config"] or config_file(DEFAULTS.policy_config))
        self.run.train.device = g["device"]
        self.run.train.iters = int(g["iters"])
        self.run.train.eval_every = int(g["eval_every"])
        self.run.train.first_checkpoint_iter = int(g["first_checkpoint_iter"])
        self.run.train.eval_episodes = self.run.train.final_eval_episodes = int(g["eval_episodes"])
        self.ppo = load_ppo_run(g["ppo_config"] or config_file(DEFAULTS.ppo_config))
        self.ppo.task = g["task"]
        self.ppo.train.device = g["device"]
        self.ppo.train.total_env_steps = int(g["ppo_env_steps"])
        self.ppo.train.n_envs = int(g["ppo_envs"])
        self.ppo.train.eval_episodes = int(g["eval_episodes"])
        self.params = g
        for name, minimum in (("demo_episodes", 1), ("iters", 1), ("eval_every", 1), ("first_checkpoint_iter", 0),
                              ("eval_episodes", 1), ("ppo_env_steps", 0), ("ppo_envs", 1)):  # fmt: skip
            if int(g[name]) < minimum:
                raise ParameterError(f"trainer_node: parameter '{name}' = {g[name]!r}: must be >= {minimum}")
        checked_device(self)  # an unknown or unavailable device stops the node here, not mid-training
        threads = int(self.get_parameter("torch_threads").value)
        if threads > 0:
            torch.set_num_threads(threads)

        self.pub = self.create_publisher(String, CHECKPOINT_TOPIC, LATCHED_QOS)
        self.diag = Diagnostics(self)
        self.hooks = TrainHooks()
        self.hooks.on_checkpoint = self.announce
        self.gate = BetterCheckpoints()
        self.status = "starting"
        self.ticks = 0
        self.rate = PhaseRate()
        self.create_service(Trigger, "~/pause", self.on_pause)
        self.create_service(Trigger, "~/resume", self.on_resume)
        self.create_service(Trigger, "~/save", self.on_save)
        self.create_timer(1.0, self.report)
        self.thread = threading.Thread(target=self.train, name="trainer", daemon=True)
        self.thread.start()

    def train(self) -> None:
        from diffpolicy_ros.rl.bc import train_bc
        from diffpolicy_ros.rl.ppo import train_ppo
        from diffpolicy_ros.sim.demos import run_demos

        try:
            demos = self.params["demos"]
            if not demos:
                self.status = "recording demonstrations"
                demos = self.run_dir / "demos.npz"
                episodes, obs_mode = int(self.params["demo_episodes"]), self.run.obs_mode()  # images if it reads them
                run_demos(self.params["task"], episodes, seed=0, obs_mode=obs_mode, out=demos, progress=False)
            self.status = "training (BC)"
            result = train_bc(self.run, demos, self.run_dir / "bc", progress=False, hooks=self.hooks)
            success = result["final_eval"].get("success_rate", "n/a")
            if self.ppo.train.total_env_steps > 0 and not self.hooks.stop.is_set():
                self.status = "training (PPO)"
                self.ppo.init = result["checkpoint"]
                self.hooks.progress.clear()
                self.rate = PhaseRate()  # PPO iterations count from 0 again, at their own pace
                result = train_ppo(self.ppo, self.run_dir / "ppo", progress=False, hooks=self.hooks)
                success = result["final_eval"].get("success_rate", "n/a")
            if self.hooks.stop.is_set():  # shut down mid-run: what was learned is saved, nothing was evaluated
                self.status = "stopped"
                self.get_logger().info(f"training stopped; last checkpoints in {self.run_dir}")
                return
            self.status = f"done: success {success}"
            self.get_logger().info(f"training finished: final success {success}; checkpoints in {self.run_dir}")
        except Exception as exc:  # report, keep the node (and the graph) up
            self.status = f"failed: {exc}"
            self.get_logger().error(f"training failed: {exc}")

    def announce(self, path: Path, metrics: dict) -> None:
        # best.pt repeats one just announced; nothing while shutting down
        if path.name != "best.pt" and rclpy.ok() and self.gate.admit(metrics):
            self.pub.publish(String(data=str(path.resolve())))
            score = f"{self.gate.best:.2f}" if self.gate.best >= 0 else "not evaluated yet"
            self.get_logger().info(f"checkpoint {path} for the policy (eval success {score})")

    def on_pause(self, request, response):
        self.hooks.running.clear()
        response.success, response.message = True, "paused"
        return response

    def on_resume(self, request, response):
        self.hooks.running.set()
        response.success, response.message = True, "resumed"
        return response

    def on_save(self, request, response):
        if not self.hooks.running.is_set():
            response.success, response.message = False, "paused: resume first"
        else:
            self.hooks.save_now.set()
            response.success, response.message = True, "checkpoint requested"
        return response

    def report(self) -> None:
        paused = not self.hooks.running.is_set()
        progress = dict(self.hooks.progress)
        level = DiagnosticStatus.ERROR if self.status.startswith("failed") else DiagnosticStatus.OK
        self.diag.publish({"status": self.status, "paused": paused, **progress}, level=level, message=self.status)
        self.ticks += 1
        finished = self.status.startswith(("done", "failed"))  # said once, when it happened
        if self.ticks % 10 == 0 and progress and not finished:  # a line a person can follow in the terminal
            rate = self.rate.update(progress.get("iter", 0), time.monotonic())
            self.get_logger().info(f"{self.status}: {progress_line(progress, rate)}")

    def close(self) -> None:
        self.hooks.stop.set()
        self.hooks.running.set()
        self.thread.join(timeout=10)


class PhaseRate:
    """Iterations per second over the whole training phase (BC, then PPO), for the ETA: a PPO iteration can
    outlast the 10 s between progress lines, so a per-line rate would swing between 0 and twice the truth."""

    def __init__(self):
        self.start: tuple[float, int] | None = None  # (time, iteration) the rate is measured from

    def update(self, it: int, now: float) -> float:
        if self.start is None or it < self.start[1]:  # first line, or a new phase counting from 0
            self.start = (now, it)
        return (it - self.start[1]) / max(now - self.start[0], 1e-6)


class BetterCheckpoints:
    """Which checkpoints the robot is given: the first one (an early BC checkpoint, unevaluated: something to
    run), then only those whose evaluation beats every one given before — through BC and PPO alike, so a
    worse PPO iteration never replaces a better policy on the arm."""

    def __init__(self):
        self.best = -1.0
        self.given = 0

    def admit(self, metrics: dict) -> bool:
        # PPO rows carry the rollout's success and, when evaluated, eval_success_rate; BC's metrics are its eval
        score = metrics.get("eval_success_rate", metrics.get("success_rate"))
        evaluated = isinstance(score, (int, float))
        if self.given and not (evaluated and score > self.best):
            return False
        self.given += 1
        if evaluated:
            self.best = float(score)
        return True


def progress_line(progress: dict, iters_per_s: float) -> str:
    """One console line: iteration of total, loss, the last evaluation with its 95 % interval, PPO's rollout
    success (a handful of episodes: noisy), env steps/s, ETA."""
    it, total = progress.get("iter", 0), progress.get("iters_total", 0)
    parts = [f"iter {it}/{total}" if total else f"iter {it}"]
    if "loss" in progress:
        parts.append(f"loss {progress['loss']:.4f}")
    success, ci = progress.get("success_rate", -1.0), progress.get("success_ci95") or ()
    if success >= 0:
        parts.append(f"eval success {success:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if len(ci) == 2 else ""))
    if "rollout_success_rate" in progress:
        parts.append(f"rollout {progress['rollout_success_rate']:.2f}")
    if "env_steps_per_s" in progress:
        parts.append(f"{progress['env_steps']} env steps, {progress['env_steps_per_s']:.0f}/s")
    parts.append(f"{iters_per_s:.2f} it/s")
    if total and iters_per_s > 0:
        minutes = (total - it) / iters_per_s / 60
        parts.append(f"ETA {minutes:.0f} min" if minutes >= 1 else "ETA < 1 min")
    return "  ".join(parts)


def main(args: list[str] | None = None) -> int:
    return run_node(TrainerNode, args, threads=1)  # training runs in its own thread


if __name__ == "__main__":
    raise SystemExit(main())
