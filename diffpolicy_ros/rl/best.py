"""The one meaning of "best": the held-out evaluation whose success is highest at the low end of its 95 %
interval (:class:`BestEvaluation`).

BC's ``best.pt``, PPO's ``best.pt`` and the checkpoints the trainer node hands the robot all use
:class:`BestEvaluation`. A rollout's own success (exploration noise, training seeds, a handful of episodes)
never counts, and neither does a checkpoint saved without an evaluation of its weights.
"""

from __future__ import annotations

from diffpolicy_ros.eval.stats import wilson_interval

# What a checkpoint carries of the held-out evaluation of its own weights (CheckpointMeta.evaluation); the deploy
# gate and `diffpolicy eval` read the same keys.
EVALUATION_KEYS = ("task", "episodes", "seed", "success_rate", "success_ci95", "mean_return")


def evaluation_record(result: dict | None) -> dict:
    """The part of an ``evaluate_policy`` result a checkpoint stores; {} for no evaluation."""
    if not result or "success_rate" not in result:
        return {}
    record = {k: result[k] for k in EVALUATION_KEYS if k in result}
    if "success_ci95" in record:
        record["success_ci95"] = [float(v) for v in record["success_ci95"]]
    return record


class BestEvaluation:
    """The best held-out evaluation so far. :meth:`offer` says whether an evaluation beats every one before it
    (ties keep the earlier one); ``None`` or ``{}`` — no evaluation — never does.

    Evaluations are ranked by the low end of their success rate's 95 % interval, so a rate measured on more
    episodes is trusted further: BC's final 100 episodes at 0.83 (0.74 at the low end) beat an interim 20 at 0.85
    (0.64), where comparing the rates would keep the 20 episodes' luck. Evaluations of one size rank as their
    rates do. An evaluation that does not say how many episodes it ran ranks by its rate."""

    def __init__(self, success_rate: float | None = None, episodes: int | None = None):
        self.success_rate, self.episodes = success_rate, episodes

    def offer(self, evaluation: dict | None) -> bool:
        if not evaluation or "success_rate" not in evaluation:
            return False
        rate, episodes = float(evaluation["success_rate"]), evaluation.get("episodes")
        if self.success_rate is not None and _low_end(rate, episodes) <= _low_end(self.success_rate, self.episodes):
            return False
        self.success_rate, self.episodes = rate, episodes
        return True


def _low_end(rate: float, episodes: int | None) -> float:
    if not episodes:
        return rate
    return wilson_interval(round(rate * episodes), int(episodes))[0]
