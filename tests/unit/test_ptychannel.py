"""The srun --pty channel's checks (batchd.cli.ptychannel): both sides prove the key, and a
frame changed, dropped or replayed on the way breaks the channel."""

from __future__ import annotations

import socket
import threading

import pytest

from batchd.cli import ptychannel as pc


def _pair(key_srun: str, key_task: str):
    a, b = socket.socketpair()
    out: dict = {}

    def srun_side():
        try:
            out["srun"] = pc.accept(a, key_srun)
        except pc.ChannelError as e:
            out["srun"] = e
            a.close()

    t = threading.Thread(target=srun_side)
    t.start()
    try:
        task = pc.connect(b, key_task)
    except pc.ChannelError as e:
        task = e
        b.close()  # as the relay does: the listener then reads the end
    t.join(5)
    return out["srun"], task


class Wire:
    """Stands for a sender's socket: keeps what it would send, one frame per call."""

    def __init__(self):
        self.frames: list[bytes] = []

    def sendall(self, data: bytes) -> None:
        self.frames.append(bytes(data))


def test_both_sides_holding_the_key_talk_both_ways():
    key = pc.new_key()
    srun, task = _pair(key, key)
    task.send(pc.DATA, b"prompt$ ")
    srun.send(pc.WINSIZE, pc.winsize_payload(50, 132))
    assert srun.recv() == [(pc.DATA, b"prompt$ ")]
    (kind, payload), = task.recv()
    assert kind == pc.WINSIZE and pc.parse_winsize(payload) == (50, 132)


def test_a_task_without_the_key_is_refused_and_so_is_a_listener_without_it():
    srun, task = _pair(pc.new_key(), pc.new_key())
    assert isinstance(task, pc.ChannelError)
    assert isinstance(srun, pc.ChannelError)


def test_a_changed_frame_breaks_the_channel():
    key = pc.new_key()
    srun, task = _pair(key, key)
    # what the task would send, with one byte of the payload flipped on the wire
    task.sock = Wire()
    task.send(pc.DATA, b"ls\r")
    wire = bytearray(task.sock.frames[0])
    wire[6] ^= 0x01
    with pytest.raises(pc.ChannelError):
        srun.feed(bytes(wire))


def test_a_replayed_or_dropped_frame_breaks_the_channel():
    key = pc.new_key()
    srun, task = _pair(key, key)
    task.sock = Wire()
    frames = task.sock.frames
    task.send(pc.DATA, b"one")
    task.send(pc.DATA, b"two")
    assert srun.feed(frames[0]) == [(pc.DATA, b"one")]
    with pytest.raises(pc.ChannelError):  # "one" again: its sequence number is spent
        srun.feed(frames[0])
    srun2, task2 = _pair(key, key)
    task2.sock = Wire()
    frames2 = task2.sock.frames
    task2.send(pc.DATA, b"one")
    task2.send(pc.DATA, b"two")
    with pytest.raises(pc.ChannelError):  # "one" dropped
        srun2.feed(frames2[1])


def test_a_frame_arriving_in_pieces_is_whole_once_complete():
    key = pc.new_key()
    srun, task = _pair(key, key)
    task.sock = Wire()
    task.send(pc.EXIT, b"-9")
    wire = task.sock.frames[0]
    assert srun.feed(wire[:3]) == [] and srun.feed(wire[3:10]) == []
    assert srun.feed(wire[10:]) == [(pc.EXIT, b"-9")]
