"""One graph definition, three launch files, and the pip-route runner's command lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from diffpolicy_ros.nodes.graph import ARGUMENTS, graph
from diffpolicy_ros.nodes.runner import parse_overrides, ros_args

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.quick


@pytest.mark.parametrize("name", sorted(ARGUMENTS))
def test_launch_file_generates_its_graph(name):
    path = REPO / "launch" / f"{name}.launch.py"
    tree = ast.parse(path.read_text())
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert "generate_launch_description" in functions
    assert f'generate("{name}")' in path.read_text()


def test_sim_train_graph_has_every_node_on_sim_time():
    nodes = {n.name: n for n in graph("sim_train")}
    assert set(nodes) == {
        "sim_bridge",
        "camera_top",
        "camera_side",
        "proprio_node",
        "instruction_node",
        "policy_node",
        "chunk_executor",
        "safety_filter",
        "trainer_node",
    }
    assert "use_sim_time" not in nodes["sim_bridge"].parameters  # it publishes /clock
    assert all(n.parameters.get("use_sim_time") for k, n in nodes.items() if k != "sim_bridge")
    assert not nodes["trainer_node"].required
    assert "trainer_node" not in {n.name for n in graph("sim_train", {"trainer": "false"})}


BOX = {"box_low": "[0.3, -0.2, 0.05]", "box_high": "0.7,0.2,0.3"}


def test_real_arm_sends_only_the_filtered_twist_to_servo_and_has_no_sim():
    nodes = {n.name: n for n in graph("real_arm", {"top_device": "0", **BOX})}
    assert "sim_bridge" not in nodes and "trainer_node" not in nodes
    assert nodes["chunk_executor"].remappings == []  # the executor's intent goes to the filter, never the arm
    flt = nodes["safety_filter"]
    assert (("/arm/cmd_twist_safe", "/servo_node/delta_twist_cmds")) in flt.remappings
    assert flt.parameters["box_low"] == [0.3, -0.2, 0.05] and flt.parameters["box_high"] == [0.7, 0.2, 0.3]
    assert flt.parameters["require_box"] and flt.parameters["dry_run"]  # a new cell starts in dry run
    assert nodes["camera_top"].parameters["device"] == "0"
    assert 'device:="0"' in ros_args(nodes["camera_top"])  # a string parameter, not the integer 0


def test_real_arm_without_a_box_gives_the_filter_none_and_a_bad_box_is_an_error():
    flt = {n.name: n for n in graph("real_arm")}["safety_filter"]
    assert "box_low" not in flt.parameters and flt.parameters["require_box"]  # the node refuses to start
    with pytest.raises(ValueError, match="box_low"):
        graph("real_arm", {"box_low": "[0.3, 0.2]", "box_high": "[1, 1, 1]"})


def test_real_arm_config_file_documents_every_argument_and_maps_the_cells_topics(tmp_path):
    import yaml

    shipped = yaml.safe_load((REPO / "config" / "real_arm.yaml").read_text())
    assert set(shipped) == set(ARGUMENTS["real_arm"]) - {"config"}  # the file documents every argument
    assert shipped["dry_run"] is True and shipped["box_low"] == ""  # safe first-run values: no assumed box

    cell = tmp_path / "cell.yaml"
    names = [f"ur_{j}" for j in range(6)]
    cell.write_text(
        yaml.safe_dump(
            {**shipped, "joint_names": ",".join(names), "joint_states_topic": "/ur/joint_states",
             "ee_pose_topic": "/ur/tool_pose", "frame_id": "base", "top_topic": "/realsense/color", "dry_run": False}
        )
    )  # fmt: skip
    nodes = {n.name: n for n in graph("real_arm", {"config": str(cell), **BOX, "max_speed": "0.05"})}
    assert nodes["proprio_node"].parameters["joint_names"] == names
    assert ("/joint_states", "/ur/joint_states") in nodes["proprio_node"].remappings
    flt = nodes["safety_filter"]
    assert ("/arm/ee_pose", "/ur/tool_pose") in flt.remappings
    assert flt.parameters["frame_id"] == "base" and nodes["policy_node"].parameters["frame_id"] == "base"
    assert flt.parameters["max_speed"] == 0.05 and not flt.parameters["dry_run"]  # the command line wins
    assert nodes["camera_top"].parameters["input_topic"] == "/realsense/color"
    assert flt.parameters["servo_node"] == "/servo_node"
    with pytest.raises(ValueError, match="joint_names"):
        graph("real_arm", {"joint_names": "a,b", **BOX})
    cell.write_text("max_sped: 0.2\n")
    with pytest.raises(ValueError, match="max_sped"):
        graph("real_arm", {"config": str(cell)})
    with pytest.raises(ValueError, match="no such file"):
        graph("real_arm", {"config": str(tmp_path / "missing.yaml")})


def test_sim_train_filters_every_command_the_sim_obeys():
    nodes = {n.name: n for n in graph("sim_train", {"real_time_factor": "0.5"})}
    flt = nodes["safety_filter"].parameters
    assert flt["box_low"] == [0.15, -0.4, 0.022] and flt["command_timeout_s"] == pytest.approx(0.5)
    # /clock follows each step's data and a busy executor takes it late: a pose a few ticks ahead is normal
    assert flt["future_tolerance_s"] >= 3 * 0.1


def test_unknown_graph_or_argument_is_an_error():
    with pytest.raises(ValueError, match="unknown graph"):
        graph("sim_play")
    with pytest.raises(ValueError, match="ddim_stepz"):
        graph("sim_train", {"ddim_stepz": "10"})
    with pytest.raises(ValueError):
        parse_overrides(["device=cuda"])
    assert parse_overrides(["device:=cuda", "config:="]) == {"device": "cuda", "config": ""}


def test_ros_args_encode_types_and_empty_strings():
    spec = graph("sim_train", {"ddim_steps": "20"})[5]
    args = ros_args(spec)
    assert args[:3] == ["--ros-args", "-r", "__node:=policy_node"]
    assert "ddim_steps:=20" in args and 'checkpoint:=""' in args and "use_sim_time:=true" in args


def test_sim_train_records_when_asked_and_replay_eval_needs_a_bag_and_a_checkpoint(tmp_path):
    nodes = {n.name: n for n in graph("sim_train", {"record": str(tmp_path / "run_bag")})}
    assert nodes["bag_recorder"].parameters["out"] == str(tmp_path / "run_bag") and not nodes["bag_recorder"].required
    assert "bag_recorder" not in {n.name for n in graph("sim_train")}
    from std_msgs.msg import String

    from diffpolicy_ros.data.bag_io import open_writer

    with pytest.raises(ValueError, match="bag:="):
        graph("replay_eval", {"checkpoint": "x.pt"})
    with pytest.raises(ValueError, match="no such file"):
        graph("replay_eval", {"bag": str(tmp_path / "missing"), "checkpoint": "x.pt"})
    with open_writer(tmp_path / "bag") as bag:  # a cell's bag: its own names, the top camera compressed
        for topic in ("/camera/color/image_raw/compressed", "/side/image_raw", "/ur/joint_states", "/servo/cmd"):
            bag.write(topic, 1, String(data="x"))
    replay = {n.name: n for n in graph("replay_eval", {"bag": str(tmp_path / "bag"), "checkpoint": "x.pt"})}
    assert set(replay) == {"bag_player", "camera_top", "camera_side", "proprio_node", "policy_node", "evaluator"}
    assert not replay["bag_player"].required and replay["evaluator"].required  # the evaluator ends the graph
    assert all(replay[n].parameters.get("use_sim_time") for n in replay if n != "bag_player")
    assert replay["bag_player"].parameters["wait_for_topic"] == "/policy/ready"  # no guessed delay
    (tmp_path / "cell.yaml").write_text(
        "image_top: /camera/color/image_raw\nimage_side: /side/image_raw\njoint_states: /ur/joint_states\n"
        "command: /servo/cmd\n"
    )
    cell = {n.name: n for n in graph("replay_eval", {"bag": str(tmp_path / "bag"), "checkpoint": "x.pt",
                                                     "topic_map": str(tmp_path / "cell.yaml")})}  # fmt: skip
    assert cell["camera_top"].parameters["input_topic"] == "/camera/color/image_raw/compressed"  # as the bag has it
    assert cell["camera_side"].parameters["input_topic"] == "/side/image_raw"
    assert ("/joint_states", "/ur/joint_states") in cell["proprio_node"].remappings
    assert cell["evaluator"].parameters["command_topic"] == "/servo/cmd"


def test_the_trainers_demos_evaluations_and_threads_are_graph_arguments():
    trainer = {n.name: n for n in graph("sim_train", {"demo_episodes": "20", "eval_episodes": "5", "threads": "2"})}
    params = trainer["trainer_node"].parameters
    assert (params["demo_episodes"], params["eval_episodes"], params["torch_threads"]) == (20, 5, 2)


def test_sim_train_trains_the_multimodal_policy_unless_asked_for_state(tmp_path):
    def trainer(**overrides: str) -> tuple[str, int]:
        params = {n.name: n for n in graph("sim_train", overrides)}["trainer_node"].parameters
        return params["config"], params["ppo_env_steps"]

    config, ppo_env_steps = trainer()
    assert config.endswith("config/policy/diffusion.yaml") and ppo_env_steps == 50_000  # cameras, proprio, text
    config, ppo_env_steps = trainer(obs="state")
    assert config.endswith("config/policy/diffusion_state.yaml") and ppo_env_steps == 200_000
    mine = str(tmp_path / "mine.yaml")
    assert trainer(obs="state", policy_config=mine, ppo_env_steps="0") == (mine, 0)
    with pytest.raises(ValueError, match="argument obs:='rgb': expected one of multimodal, state"):
        graph("sim_train", {"obs": "rgb"})


def test_sim_train_weak_start_runs_the_bench_weak_recipe_and_arguments_still_win():
    from diffpolicy_ros.bench.learn import RECIPES
    from diffpolicy_ros.rl.ppo import load_ppo_run

    def trainer(**overrides: str) -> dict:
        return {n.name: n for n in graph("sim_train", overrides)}["trainer_node"].parameters

    full, weak = trainer(), trainer(start="weak")
    assert (full["iters"], full["demo_episodes"], full["ppo_envs"], full["eval_episodes"]) == (2000, 100, 4, 10)
    assert full["ppo_config"].endswith("config/train/push.yaml")
    bench = RECIPES["push"]  # what `diffpolicy bench learn --start weak` measured, run by the graph
    assert weak["config"].endswith(f"config/{bench.weak['diffusion'].policy_config}")
    assert weak["ppo_config"].endswith(f"config/{bench.weak_train_config}")
    assert (weak["iters"], weak["demo_episodes"]) == (bench.weak["diffusion"].iters, bench.weak_demos)
    ppo = load_ppo_run(weak["ppo_config"]).train  # the trainer sets these three from its parameters
    assert (weak["ppo_env_steps"], weak["ppo_envs"], weak["eval_episodes"]) == (
        ppo.total_env_steps, ppo.n_envs, ppo.eval_episodes,
    )  # fmt: skip
    assert trainer(start="weak", iters="900", ppo_envs="8")["iters"] == 900
    assert trainer(start="weak", iters="900", ppo_envs="8")["ppo_envs"] == 8
    assert full["deploy"] == ""  # PPO in the plain sim unless told
    assert trainer(deploy=str(REPO / "config" / "real_arm.yaml"))["deploy"] == str(REPO / "config" / "real_arm.yaml")
    with pytest.raises(ValueError, match="argument start:='strong': expected one of full, weak"):
        graph("sim_train", {"start": "strong"})
