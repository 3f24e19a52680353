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
from diffpolicy_ros.config import override
from diffpolicy_ros.contract import CHECKPOINT_TOPIC, TASK_NAMES
from diffpolicy_ros.errors import StopRequested
from diffpolicy_ros.models.checkpoint import describe_evaluation
from diffpolicy_ros.nodes.common import (
    LATCHED_QOS,
    Diagnostics,
    checked_device,
    file_parameter,
    number,
    parameter,
    run_node,
    say,
)
from diffpolicy_ros.rl.best import BestEvaluation
from diffpolicy_ros.rl.hooks import TrainHooks
from diffpolicy_ros.rl.recipes import DEFAULT_RECIPE as DEFAULTS  # what it trains when not told (sim_train's)
from diffpolicy_ros.runs import RunDir, link_checkpoint, new_run_dir
from diffpolicy_ros.user_files import CELL_FILE, DATASET, DEPLOYMENT, POLICY_CONFIG, TRAIN_CONFIG

MAX_COUNT = 10_000_000  # the upper end of the declared ranges of counts (rclpy ranges need both ends)


class TrainerNode(Node):
    FILE_PARAMETERS = {"config": POLICY_CONFIG, "demos": DATASET, "ppo_config": TRAIN_CONFIG, "deploy": DEPLOYMENT,
                       "cells": CELL_FILE}  # fmt: skip

    def __init__(self):
        super().__init__("trainer_node")
        # parameters: declared with their domains (ros2 param describe shows them); a bad value stops the node
        # here with one line naming it, not mid-training
        # the trainer needs the simulator; imported here so every node module imports on a robot PC without one
        from diffpolicy_ros.data.episodes import EpisodeDataset
        from diffpolicy_ros.nodes.graph import load_deployment
        from diffpolicy_ros.rl.bc import load_bc_run
        from diffpolicy_ros.rl.ppo import load_ppo_run
        from diffpolicy_ros.sim.cell import load_cell_ranges

        # the files: each read here, so a bad one stops the node with one line before any training
        config, bc_run = file_parameter(self, "config", "the policy/BC config (default: the multimodal policy)",
                                        load_bc_run)  # fmt: skip
        demos, self.dataset = file_parameter(self, "demos", "a dataset; empty: record demo_episodes with the expert",
                                             EpisodeDataset.load)  # fmt: skip
        if self.dataset is not None:  # what the checkpoints' meta names as their data
            self.dataset.meta.setdefault("source", [demos])
        ppo_config, ppo_run = file_parameter(self, "ppo_config", f"default: {DEFAULTS.ppo_config}", load_ppo_run)
        deploy, deployment = file_parameter(self, "deploy", "a real_arm file: PPO fine-tunes in the sim as deployed",
                                            load_deployment)  # fmt: skip
        cells_file, cells = file_parameter(self, "cells", "a cell file: demonstrations and PPO in sampled cells",
                                           load_cell_ranges)  # fmt: skip
        self.cells = {"cells": cells} if cells is not None else {}  # the sim's settings of both
        # evaluations in sampled cells on held-out seeds are held-out cells: said so in every line about them
        self.evaluated_on = "held-out-cell" if cells is not None else "eval"
        text = {
            "config": config,
            "demos": demos,
            "task": parameter(self, "task", "push", lambda v: v in TASK_NAMES, f"one of {', '.join(TASK_NAMES)}"),
            "run_dir": parameter(self, "run_dir", ""),
            "ppo_config": ppo_config,
            "deploy": deploy,
            "cells": cells_file,
        }
        device = checked_device(self)  # an unknown or unavailable device stops the node here, not mid-training
        n = {
            "demo_episodes": number(self, "demo_episodes", DEFAULTS.demo_episodes, 1, MAX_COUNT),
            "iters": number(self, "iters", DEFAULTS.iters, 1, MAX_COUNT),
            "eval_every": number(self, "eval_every", DEFAULTS.eval_every, 1, MAX_COUNT,
                                 description="BC iterations between evaluations (each writes a checkpoint)"),
            "first_checkpoint_iter": number(self, "first_checkpoint_iter", 50, 0, MAX_COUNT,
                                            description="an early, unevaluated checkpoint: the arm moves soon"),
            "eval_episodes": number(self, "eval_episodes", DEFAULTS.eval_episodes, 1, MAX_COUNT),
            "ppo_env_steps": number(self, "ppo_env_steps", DEFAULTS.ppo_env_steps, 0, MAX_COUNT**2,
                                    description="0: BC only"),
            "ppo_envs": number(self, "ppo_envs", DEFAULTS.ppo_envs, 1, 256,
                               description="PPO sim workers (they share the CPU with the graph)"),
            "torch_threads": number(self, "torch_threads", 1, 0, 256,
                                    description="share the CPU with the sim and the policy node (0: torch's default)"),
        }  # fmt: skip
        self.run_folder = RunDir(Path(text["run_dir"])) if text["run_dir"] else new_run_dir("sim_train")
        self.run_dir = self.run_folder.path
        self.run = bc_run or load_bc_run(config_file(DEFAULTS.policy_config))
        self.run.train = override(
            self.run.train,
            device=device,
            iters=n["iters"],
            eval_every=n["eval_every"],
            first_checkpoint_iter=n["first_checkpoint_iter"],
            eval_episodes=n["eval_episodes"],
            final_eval_episodes=n["eval_episodes"],
        )
        self.ppo = ppo_run or load_ppo_run(config_file(DEFAULTS.ppo_config))
        self.ppo.task = text["task"]
        if deployment is not None:
            self.ppo.deploy = deployment.as_dict()
        self.ppo.env = {**self.ppo.env, **self.cells}
        self.ppo.train = override(
            self.ppo.train,
            device=device,
            total_env_steps=n["ppo_env_steps"],
            n_envs=n["ppo_envs"],
            eval_episodes=n["eval_episodes"],
        )
        self.params = {**text, **n}
        if n["torch_threads"] > 0:
            torch.set_num_threads(n["torch_threads"])

        self.pub = self.create_publisher(String, CHECKPOINT_TOPIC, LATCHED_QOS)
        self.diag = Diagnostics(self)
        self.hooks = TrainHooks()
        self.hooks.on_checkpoint = self.announce
        self.hooks.on_evaluation = self.on_evaluation
        self.gate = BetterCheckpoints()
        self.run_best = BestEvaluation()  # over BC and PPO: what RUN_DIR/checkpoints/best.pt links to
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
            self.run_folder.start()
            demos = self.dataset  # read at start
            log = self.get_logger()
            ppo_steps = self.ppo.train.total_env_steps
            plan = f"BC {self.run.train.iters} iterations" + (f", then PPO to {ppo_steps} env steps" * bool(ppo_steps))
            if demos is None:
                self.status = "recording demonstrations"
                demos = self.run_dir / "demos.npz"
                episodes, obs_mode = int(self.params["demo_episodes"]), self.run.obs_mode()  # images if it reads them
                cameras = " with both cameras" if obs_mode == "image" else ""
                log.info(f"recording {episodes} expert demonstrations{cameras} for BC; then {plan}")

                def on_episode(done: int, total: int) -> None:
                    self.hooks.progress.update(iter=done, iters_total=total, unit="episode")

                run_demos(self.params["task"], episodes, seed=0, obs_mode=obs_mode, out=demos, progress=False,
                          env_overrides=self.cells, on_episode=on_episode, stop=self.hooks.stop)  # fmt: skip
                self.hooks.progress.clear()
                self.rate = PhaseRate()
            self.status = "training (BC)"
            log.info(f"{plan}; the first checkpoint (unevaluated) at iteration {self.run.train.first_checkpoint_iter}")
            result = train_bc(self.run, demos, self.run_dir / "bc", progress=False, hooks=self.hooks)
            success = result["final_eval"].get("success_rate", "n/a")
            if self.ppo.train.total_env_steps > 0 and not self.hooks.stop.is_set():
                self.status = "training (PPO)"
                log.info(f"BC done ({describe_evaluation(result['final_eval'])}); PPO to {ppo_steps} env steps")
                self.ppo.init = result["checkpoint"]
                self.hooks.progress.clear()
                self.rate = PhaseRate()  # PPO iterations count from 0 again, at their own pace
                result = train_ppo(self.ppo, self.run_dir / "ppo", progress=False, hooks=self.hooks)
                success = result["final_eval"].get("success_rate", "n/a")
            if self.hooks.stop.is_set():  # shut down mid-run: what was learned is saved, nothing was evaluated
                self.status = "stopped"
                say(self, f"training stopped; last checkpoints in {self.run_dir}")
                return
            self.status = f"done: success {success}"
            self.get_logger().info(f"training finished: final success {success}; checkpoints in {self.run_dir}")
        except StopRequested:  # shut down while recording demonstrations: nothing to keep yet
            self.status = "stopped"
            say(self, f"stopped while recording demonstrations; nothing written to {self.run_dir}")
        except Exception as exc:  # report, keep the node (and the graph) up
            if self.hooks.stop.is_set():  # the stop outlasted close()'s wait, and the exit ended the sim workers
                self.status = "stopped"
                say(self, f"training stopped ({type(exc).__name__} while shutting down); checkpoints in {self.run_dir}")
                return
            self.status = f"failed: {exc}"
            self.get_logger().error(f"training failed: {exc}")

    def announce(self, path: Path, evaluation: dict) -> None:
        self.run_folder.wrote_checkpoint()  # runs/latest: this run, now that it has something to load
        run_best = self.run_dir / "checkpoints" / "best.pt"
        if path.name == "best.pt":  # repeats one just announced; RUN_DIR/checkpoints/best.pt follows the best
            if self.run_best.offer(evaluation):
                link_checkpoint(run_best, path)
            return
        if self.run_best.success_rate is None:  # nothing evaluated yet: a run stopped now leaves its newest
            link_checkpoint(run_best, path)  # checkpoint (unevaluated) where the README's next command looks
        if rclpy.ok() and self.gate.admit(evaluation):  # nothing while shutting down
            self.pub.publish(String(data=str(path.resolve())))
            best = self.gate.best.success_rate
            score = f"{best:.2f}" if best is not None else "not evaluated yet"
            self.get_logger().info(f"checkpoint {path} for the policy ({self.evaluated_on} success {score})")

    def on_evaluation(self, iteration: int, episodes: int) -> None:
        phase = self.status.removeprefix("training ").strip("()")
        on = "held-out cells (one per episode)" if self.cells else "held-out episodes"
        say(self, f"evaluating {phase} iteration {iteration} on {episodes} {on}")

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
            self.get_logger().info(f"{self.status}: {progress_line(progress, rate, self.evaluated_on)}")

    def close(self) -> None:
        self.hooks.stop.set()
        self.hooks.running.set()
        self.thread.join(timeout=4.0)  # a node stops within 5 s; the daemon thread's last step is dropped


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
    run), then only those whose held-out evaluation is the best so far (rl/best.py) — through BC and PPO alike,
    so a worse PPO iteration never replaces a better policy on the arm."""

    def __init__(self):
        self.best = BestEvaluation()
        self.given = 0

    def admit(self, evaluation: dict) -> bool:
        if not self.best.offer(evaluation) and self.given:
            return False
        self.given += 1
        return True


def progress_line(progress: dict, iters_per_s: float, evaluated_on: str = "eval") -> str:
    """One console line: iteration of total, loss, the last evaluation with its 95 % interval, PPO's rollout
    success (a handful of episodes: noisy), env steps/s, ETA."""
    it, total, unit = progress.get("iter", 0), progress.get("iters_total", 0), progress.get("unit", "iter")
    parts = [f"{unit} {it}/{total}" if total else f"{unit} {it}"]
    if "loss" in progress:
        parts.append(f"loss {progress['loss']:.4f}")
    success, ci = progress.get("success_rate", -1.0), progress.get("success_ci95") or ()
    if success >= 0:
        interval = f" [{ci[0]:.2f}, {ci[1]:.2f}]" if len(ci) == 2 else ""
        parts.append(f"{evaluated_on} success {success:.2f}{interval}")
    if "rollout_success_rate" in progress:
        parts.append(f"rollout {progress['rollout_success_rate']:.2f}")
    if "env_steps_per_s" in progress:
        parts.append(f"{progress['env_steps']} env steps, {progress['env_steps_per_s']:.0f}/s")
    if iters_per_s > 0:  # the first line of a phase has no rate yet
        parts.append(f"{iters_per_s:.2f} {'ep' if unit == 'episode' else 'it'}/s")
    if total and iters_per_s > 0:
        minutes = (total - it) / iters_per_s / 60
        parts.append(f"ETA {minutes:.0f} min" if minutes >= 1 else "ETA < 1 min")
    return "  ".join(parts)


def main(args: list[str] | None = None) -> int:
    return run_node(TrainerNode, args, threads=1)  # training runs in its own thread


if __name__ == "__main__":
    raise SystemExit(main())
