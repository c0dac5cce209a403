"""The sweep's pure parts: message sizes, nccl-tests size convention, exact expected values."""

import pytest
import torch

from ddpbench.comm import commbench
from ddpbench.comm.commbench import case_numel, fill, first_mismatch, message_sizes, summed

CPU = torch.device("cpu")


def test_message_sizes_double_from_min_to_max():
    sizes = message_sizes(4, 64 * 2**20)
    assert sizes[0] == 4 and sizes[-1] == 64 * 2**20 and len(sizes) == 25
    assert all(b == 2 * a for a, b in zip(sizes, sizes[1:]))
    assert message_sizes(5, 40) == [8, 16, 32]  # min rounded up to whole float32 elements
    with pytest.raises(ValueError, match="min-bytes"):
        message_sizes(2, 64)
    with pytest.raises(ValueError, match="max-bytes"):
        message_sizes(64, 32)


def test_total_size_convention_rounds_to_multiple_of_world():
    # all_gather/reduce_scatter: bytes = total buffer, a multiple of p elements (nccl-tests).
    assert case_numel("all_gather", 4, 2) == 0  # too small: skipped
    assert case_numel("all_gather", 8, 2) == 2
    assert case_numel("reduce_scatter", 64, 3) == 15
    assert case_numel("all_reduce", 4, 3) == 1
    assert case_numel("broadcast", 64, 3) == 16
    # Strictly increasing after rounding, so the CSV's sizes stay monotone at any p.
    for p in (2, 3, 5, 7):
        got = [case_numel("all_gather", s, p) for s in message_sizes(4, 2**20)]
        got = [n for n in got if n]
        assert all(b > a for a, b in zip(got, got[1:]))


@pytest.mark.parametrize("world", [1, 2, 3, 8])
def test_expected_sum_is_exact(world):
    n = 1000
    total = sum(fill(r, n, CPU) for r in range(world))
    assert torch.equal(total, summed(world, n, CPU))
    # A reduce-scatter part: the sum of elements start..start+m of every rank's input.
    assert torch.equal(summed(world, 100, CPU, start=300), total[300:400])


def test_fill_distinguishes_ranks_and_chunk_positions():
    a, b = fill(0, 512, CPU), fill(1, 512, CPU)
    assert not torch.equal(a, b)
    # Swapped halves (a misplaced all_gather/reduce_scatter chunk) never look right.
    assert not torch.equal(a[:256], a[256:])
    assert fill(0, 4, CPU, start=250).tolist() == [251.0, 1.0, 2.0, 3.0]


def test_first_mismatch_names_the_element():
    exp = torch.arange(10, dtype=torch.float32)
    assert first_mismatch(exp.clone(), exp) is None
    got = exp.clone()
    got[7] = -1.0
    msg = first_mismatch(got, exp)
    assert "element 7 of 10" in msg and "-1.0" in msg and "expected 7.0" in msg


def test_memcpy_case_checks_its_copy():
    case = commbench.make_case("memcpy", 4096, rank=0, world=2, device=CPU)
    case.reset()
    assert first_mismatch(case.result(), case.expected) is not None  # sentinel before the copy
    case.run()
    assert first_mismatch(case.result(), case.expected) is None
    assert case.nbytes == 4096


def test_parser_validates_collectives():
    parser = commbench.build_parser()
    args = parser.parse_args(["--out", "x.csv", "--collectives", "all"])
    assert args.collectives == list(commbench.COLLECTIVES)
    args = parser.parse_args(["--out", "x.csv", "--collectives", "ring_all_reduce,broadcast"])
    assert args.collectives == ["ring_all_reduce", "broadcast"]
    assert args.max_bytes == 64 * 2**20 and args.min_bytes == 4 and args.device == "cpu"
    with pytest.raises(SystemExit):
        parser.parse_args(["--out", "x.csv", "--collectives", "all_to_all"])


def test_requires_torchrun(monkeypatch, capsys):
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(SystemExit, match="torchrun"):
        commbench.main(["--out", "x.csv", "--max-bytes", "64"])
