"""The failure diagnosis from the evidence a run folder holds (no processes: the fault
matrix in tests/faults makes the same evidence for real)."""

import os
import time

from ddpbench.run import diagnose

TORCHRUN_REPORT = """
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
ddpbench.run.train FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-23_07:52:16
  host      : node
  rank      : 1 (local_rank: 1)
  exitcode  : -15 (pid: 10481)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 10481
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-23_07:52:16
  host      : node
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 10480)
"""


def beat(out, rank, step, laps, age_s=0.0):
    hb = diagnose.Heartbeat(out / f"heartbeat_rank{rank}")
    hb.step, hb.laps = step, laps
    diagnose.HEARTBEAT.pack_into(hb._map, 0, step, laps, os.getpid(), time.time() - age_s, 0, b"")


def test_torchrun_report_gives_each_failed_rank_its_exit_code():
    assert diagnose.torchrun_exit_codes(TORCHRUN_REPORT) == {1: -15, 0: 1}


def test_heartbeat_survives_in_the_file_and_names_the_phase(tmp_path):
    hb = diagnose.Heartbeat(tmp_path / "heartbeat_rank3")
    hb.start_step(7)
    hb.lap(), hb.lap()  # data and forward done: in backward
    got = diagnose.read_heartbeats(tmp_path)[3]
    assert (got.step, got.laps, got.pid) == (7, 2, os.getpid()) and got.where == "at step 7 (backward)"
    hb.finishing()
    assert diagnose.read_heartbeats(tmp_path)[3].where == "after training (evaluation, summary)"


def test_a_lost_peer_timeout_in_a_hook_callback_is_not_the_cause(tmp_path):
    """Rank 0's error is a DDP callback's timeout (followed by an 'At:' location); rank 1 was
    behind and only SIGTERMed by torchrun: rank 1 hung."""
    (tmp_path / "error_rank0.txt").write_text(
        "Traceback (most recent call last):\n  ...\nRuntimeError: Got the following error when running the callback: "
        "RuntimeError: [gloo/unbound_buffer.cc:78] Timed out waiting 20000ms for recv operation to complete\n\n"
        "At:\n  /src/ddpbench/strategies/ddp.py(115): done\n"
    )
    beat(tmp_path, 0, 3, 2)
    beat(tmp_path, 1, 3, 0, age_s=20)
    f = diagnose.diagnose(tmp_path, 2, log_text=TORCHRUN_REPORT)
    assert (f["kind"], f["rank"], f["step"]) == ("hang", 1, 3)
    assert f["secondary"][0].startswith("rank 0 at step 3 (backward): RuntimeError: Got the following error")


def test_cuda_out_of_memory_is_oom_and_the_peer_secondary(tmp_path):
    (tmp_path / "error_rank1.txt").write_text(
        "Traceback ...\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
        "capacity of 79.19 GiB of which 1.10 GiB is free.\n"
    )
    time.sleep(0.01)
    (tmp_path / "error_rank0.txt").write_text("Traceback ...\nRuntimeError: Connection closed by peer [127.0.0.1]:1\n")
    beat(tmp_path, 0, 12, 3)
    beat(tmp_path, 1, 12, 1)
    f = diagnose.diagnose(tmp_path, 2)
    assert (f["kind"], f["rank"], f["step"], f["phase"]) == ("oom", 1, 12, "at step 12 (forward)")
    assert "Tried to allocate 2.00 GiB" in f["reason"] and "Connection closed" in f["secondary"][0]


def test_a_signal_beats_the_exceptions_it_caused_and_sigterm_alone_is_not_blamed(tmp_path):
    (tmp_path / "error_rank0.txt").write_text("RuntimeError: Connection reset by peer\n")
    beat(tmp_path, 0, 9, 3)
    beat(tmp_path, 1, 9, 2)
    log = TORCHRUN_REPORT.replace("exitcode  : -15 (pid: 10481)", "exitcode  : -9 (pid: 10481)")
    f = diagnose.diagnose(tmp_path, 2, log_text=log)
    assert (f["kind"], f["rank"], f["signal"]) == ("signal", 1, "SIGKILL") and "out-of-memory killer sends" in f["reason"]
    f = diagnose.diagnose(tmp_path, 2, log_text=log, oom_kills_during=1)
    assert f["kind"] == "oom" and "out-of-memory killer fired" in f["reason"]


def test_the_silent_rank_is_the_oom_victim_when_torchrun_names_only_the_survivor(tmp_path):
    # Forked ranks: rank 1 is OOM-killed, rank 0 raises "connection closed" and exits first, and
    # torchrun's report names only rank 0 (exit code 1). Rank 1 left no error and no exit code.
    (tmp_path / "error_rank0.txt").write_text("RuntimeError: [pair.cc:561] Connection closed by peer [198.18.0.2]:1234\n")
    beat(tmp_path, 0, 5, 3)
    beat(tmp_path, 1, 5, 2)
    only_rank0 = TORCHRUN_REPORT.split("Root Cause")[1]
    f = diagnose.diagnose(tmp_path, 2, log_text=only_rank0, oom_kills_during=1)
    assert (f["kind"], f["rank"], f["signal"]) == ("oom", 1, "SIGKILL") and "out-of-memory killer fired" in f["reason"]
    assert f["secondary"] and f["secondary"][0].startswith("rank 0 ")
    f = diagnose.diagnose(tmp_path, 2, log_text=only_rank0)  # no OOM kill counted: killed all the same
    assert (f["kind"], f["rank"], f["signal"]) == ("signal", 1, "SIGKILL") and "inferred" in f["reason"]
    (tmp_path / "error_rank1.txt").write_text("RuntimeError: Connection reset by peer\n")  # both only lost a peer
    f = diagnose.diagnose(tmp_path, 2, log_text=only_rank0)
    assert (f["kind"], f["rank"]) == ("exception", 0)


def test_wall_clock_limit_without_a_rank_behind_is_a_timeout(tmp_path):
    beat(tmp_path, 0, 40, 2)
    beat(tmp_path, 1, 40, 2)
    f = diagnose.diagnose(tmp_path, 2, timed_out=True, limit_s=90.0)
    assert (f["kind"], f["rank"]) == ("timeout", None)
    assert f["reason"].startswith("wall-clock limit of 90 s exceeded") and "rank 1 at step 40" in f["reason"]


def test_summary_reason_puts_the_cause_first():
    f = {"reason": "rank 1 raised at step 5 (data): ValueError: x", "secondary": ["rank 0 ...: lost peer"]}
    assert diagnose.summary_reason(f, "traceback").splitlines() == [
        "rank 1 raised at step 5 (data): ValueError: x", "then: rank 0 ...: lost peer", "traceback",
    ]  # fmt: skip


def test_a_rank_that_could_not_write_is_a_storage_failure_naming_the_file(tmp_path):
    import errno

    beat(tmp_path, 0, 4, 1)
    hb = diagnose.Heartbeat(tmp_path / "heartbeat_rank1")
    hb.start_step(5)
    hb.storage_failed(OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "steps_rank1.csv")))
    # rank 0 then loses its peer: secondary, never the cause
    (tmp_path / "error_rank0.txt").write_text("Traceback...\nRuntimeError: Connection closed by peer\n")
    failure = diagnose.diagnose(tmp_path, 2, log_text=TORCHRUN_REPORT)
    assert failure["kind"] == "storage" and failure["rank"] == 1 and failure["step"] == 5
    assert "steps_rank1.csv" in failure["reason"] and "No space left on device" in failure["reason"]
    assert "free" in failure["reason"]  # the filesystem's free space
    assert any(s.startswith("rank 0") for s in failure["secondary"])


def test_without_any_rank_s_word_an_unwritable_folder_is_the_storage_cause(tmp_path):
    failure = diagnose.diagnose(tmp_path, 2, storage_problem="cannot write x: No space left on device (0 B free)")
    assert failure["kind"] == "storage" and "No space left" in failure["reason"]
    assert diagnose.diagnose(tmp_path, 2)["kind"] == "exception"  # the same evidence, a writable folder


def test_a_heartbeat_is_created_by_a_write_so_a_full_disk_raises_instead_of_sigbus(tmp_path, monkeypatch):
    import errno

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(diagnose.os, "write", full)
    try:
        diagnose.Heartbeat(tmp_path / "heartbeat_rank0")
    except OSError as err:
        assert err.errno == errno.ENOSPC
    else:
        raise AssertionError("the heartbeat did not write its first record with write()")
