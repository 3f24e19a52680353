"""rosbag2 files without rosbag2: the ``rosbags`` library writes and reads the same files (MCAP or sqlite3,
metadata version 9 for Jazzy, 8 for Humble), and ``rclpy.serialization`` turns ROS messages into the CDR
bytes a live subscription would carry, so a bag written here plays in ``ros2 bag play`` and opens in Foxglove.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rosbags.interfaces import Qos, QosDurability, QosHistory, QosLiveliness, QosReliability, QosTime
from rosbags.rosbag2 import CompressionFormat, CompressionMode, Reader, ReaderError, StoragePlugin, Writer
from rosbags.typesys import Stores, get_typestore

from diffpolicy_ros.errors import UserError
from diffpolicy_ros.user_files import BAG, UserFileError, check_input

TYPESTORE = get_typestore(Stores.ROS2_JAZZY)
STORAGE = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}
UNKNOWN_RIHS01 = "RIHS01_" + "0" * 64
EPISODE_TOPIC = "/diffpolicy/episode"  # std_msgs/String JSON: {"event": "start"|"end", "episode", "seed", ...}


class BagError(UserError):
    """A bag that cannot be used: missing, corrupt, or without a topic we need (the message says which)."""


def msgtype(msg_or_class) -> str:
    """'sensor_msgs/msg/Image' for an rclpy message or its class."""
    cls = msg_or_class if isinstance(msg_or_class, type) else type(msg_or_class)
    package = cls.__module__.split(".")[0]
    return f"{package}/msg/{cls.__name__}"


def message_class(type_name: str):
    """The rclpy class of 'pkg/msg/Name' (None when the package is not installed)."""
    package, _, name = type_name.split("/")
    try:
        return getattr(importlib.import_module(f"{package}.msg"), name)
    except (ImportError, AttributeError):
        return None


def qos_profile(reliable: bool, transient_local: bool = False, depth: int = 10) -> Qos:
    """The offered QoS recorded in metadata.yaml (what ``ros2 bag play`` re-offers)."""
    zero = QosTime(sec=0, nsec=0)
    return Qos(
        history=QosHistory.KEEP_LAST,
        depth=depth,
        reliability=QosReliability.RELIABLE if reliable else QosReliability.BEST_EFFORT,
        durability=QosDurability.TRANSIENT_LOCAL if transient_local else QosDurability.VOLATILE,
        deadline=zero,
        lifespan=zero,
        liveliness=QosLiveliness.AUTOMATIC,
        liveliness_lease_duration=zero,
        avoid_ros_namespace_conventions=False,
    )


class BagWriter:
    """``write(topic, stamp_ns, msg)`` with rclpy messages; connections are added on first use."""

    def __init__(self, writer: Writer):
        self.writer = writer
        self.connections: dict[str, object] = {}
        self.qos: dict[str, Qos] = {}

    def offer_qos(self, topic: str, qos: Qos) -> None:
        self.qos[topic] = qos

    def write(self, topic: str, stamp_ns: int, msg) -> None:
        from rclpy.serialization import serialize_message

        self.write_raw(topic, msgtype(msg), stamp_ns, serialize_message(msg))

    def write_raw(self, topic: str, type_name: str, stamp_ns: int, data: bytes) -> None:
        conn = self.connections.get(topic)
        if conn is None:
            qos = self.qos.get(topic, qos_profile(reliable=True))
            if type_name in TYPESTORE.fielddefs:  # the definition and RIHS01 hash readers need
                conn = self.writer.add_connection(topic, type_name, typestore=TYPESTORE, offered_qos_profiles=[qos])
            else:  # a custom type: its .msg text is not known here; readers that need it cannot decode it
                conn = self.writer.add_connection(
                    topic, type_name, msgdef="", rihs01=UNKNOWN_RIHS01, offered_qos_profiles=[qos]
                )
            self.connections[topic] = conn
        self.writer.write(conn, int(stamp_ns), data)


@contextmanager
def open_writer(path: str | Path, storage: str = "mcap", metadata_version: int = 9) -> Iterator[BagWriter]:
    """A new bag folder (it must not exist); MCAP chunks zstd-compressed. ``metadata_version`` 8 for Humble."""
    if storage not in STORAGE:
        raise BagError(f"storage must be one of {sorted(STORAGE)}, got {storage!r}")
    if metadata_version not in (8, 9):
        raise BagError(f"metadata version must be 8 (Humble) or 9 (Jazzy), got {metadata_version}")
    path = Path(path)
    if path.exists():
        raise BagError(f"{path} exists: rosbag2 writes a new folder")
    writer = Writer(path, version=metadata_version, storage_plugin=STORAGE[storage])
    if storage == "mcap":
        # per-message compression is rejected by rosbag2's mcap reader; chunk compression is what it writes
        writer.set_compression(CompressionMode.STORAGE, CompressionFormat.ZSTD)
    writer.open()
    try:
        yield BagWriter(writer)
    finally:
        writer.close()


@dataclass
class BagInfo:
    path: Path
    topics: dict[str, str]  # topic -> type
    counts: dict[str, int]
    start_ns: int
    end_ns: int

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) * 1e-9


def bag_info(path: str | Path) -> BagInfo:
    with _open_reader(path) as reader:
        return BagInfo(
            Path(path),
            {c.topic: c.msgtype for c in reader.connections},
            {c.topic: c.msgcount for c in reader.connections},
            reader.start_time,
            reader.end_time,
        )


@contextmanager
def _open_reader(path: str | Path) -> Iterator[Reader]:
    try:
        path = check_input(path, BAG)
    except UserFileError as exc:
        raise BagError(str(exc)) from None
    try:
        reader = Reader(path)
        reader.open()
    except (ReaderError, OSError, ValueError, KeyError) as exc:
        raise BagError(f"{path}: not a readable rosbag2 bag ({exc})") from exc
    try:
        yield reader
    finally:
        reader.close()


def require_topics(info: BagInfo, needed: Iterable[str]) -> None:
    missing = [t for t in needed if t not in info.topics]
    if missing:
        held = ", ".join(f"{t} ({info.topics[t]})" for t in sorted(info.topics)) or "nothing"
        raise BagError(f"{info.path}: missing topic(s) {missing}; the bag holds: {held}")


def read_messages(
    path: str | Path, topics: Iterable[str] | None = None, warn=print
) -> Iterator[tuple[str, int, object]]:
    """(topic, log time ns, rclpy message) in log-time order. Unknown types are skipped with one warning
    each; a truncated or corrupt bag yields what it could read, then raises BagError."""
    from rclpy.serialization import deserialize_message

    wanted = set(topics) if topics is not None else None
    with _open_reader(path) as reader:
        classes = {}
        for conn in reader.connections:
            if wanted is not None and conn.topic not in wanted:
                continue
            cls = message_class(conn.msgtype)
            if cls is None:
                warn(f"{path}: skipping {conn.topic}: message type {conn.msgtype} is not installed")
                continue
            classes[conn.id] = cls
        chosen = [c for c in reader.connections if c.id in classes]
        try:
            for conn, t_ns, raw in reader.messages(connections=chosen):
                yield conn.topic, t_ns, deserialize_message(bytes(raw), classes[conn.id])
        except BagError:
            raise
        except Exception as exc:  # truncated chunk, bad CDR, sqlite error: stop with what was read
            raise BagError(f"{path}: corrupt after some messages ({type(exc).__name__}: {exc})") from exc
