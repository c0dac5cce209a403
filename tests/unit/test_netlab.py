"""ddpbench.cluster.netlab without root: link settings and the launcher commands of each node."""

import pytest

from ddpbench.cluster import netlab


def test_link_rates_and_tbf_arguments():
    assert netlab.Link("unshaped").rate_bps is None
    assert netlab.Link("unshaped").tbf_args() == []
    assert netlab.Link("100mbit").rate_bps == 100e6
    assert netlab.Link("1gbit").rate_bps == 1e9
    args = netlab.Link("20mbit").tbf_args()
    assert args[:3] == ["tbf", "rate", "20mbit"]
    assert int(args[args.index("burst") + 1]) >= 64 * 1024


@pytest.mark.parametrize("bad", ["fast", "100", "100mb", "-1mbit", ""])
def test_bad_link_names_the_setting(bad):
    with pytest.raises(ValueError, match="'link'"):
        netlab.Link(bad)


def test_node_commands_rendezvous_on_node_zero(tmp_path):
    cmds = [netlab.launch_command(n, tmp_path, 2, ["--model", "mlp"], port=29555) for n in (0, 1)]
    for node, cmd in enumerate(cmds):
        assert cmd[cmd.index("--rdzv-endpoint") + 1] == "198.18.0.1:29555"
        assert cmd[cmd.index("--nnodes") + 1] == "2"
        assert cmd[cmd.index("--node-rank") + 1] == str(node)
        assert cmd[-2:] == ["--model", "mlp"]


def test_addresses_stay_in_the_benchmarking_range():
    import ipaddress

    bench = ipaddress.ip_network("198.18.0.0/15")
    assert all(ipaddress.ip_address(a) in bench for a in netlab.ADDRESSES)
    lab = netlab.TwoNodeLab(tag="123")
    assert all(len(dev) <= 15 for dev in lab.interfaces + lab._tmp_names)
    env = lab.node_env(1, base={"DDPBENCH_PROGRESS": "/r/progress.json"})
    assert env["GLOO_SOCKET_IFNAME"] == "ddpb0" and env["PET_LOCAL_ADDR"] == "198.18.0.2"
    assert "DDPBENCH_PROGRESS" not in env  # a node's launcher does not count the run a second time


def test_bad_cell_flag_or_link_exits_2_before_anything(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        netlab.main(["--link", "100mbit", "--out", str(tmp_path / "r"), "--strategy", "nope"])
    assert e.value.code == 2 and "strategy" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        netlab.main(["--link", "fast", "--out", str(tmp_path / "r")])
    assert e.value.code == 2 and "'link'" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_without_a_lab_every_run_still_gets_a_failed_summary(tmp_path, monkeypatch):
    import json

    monkeypatch.setattr(netlab, "available", lambda: "needs root (network namespaces)")
    rc = netlab.main(["--link", "unshaped,20mbit", "--out-root", str(tmp_path), "--model", "mlp", "--max-steps", "2"])
    assert rc == 0
    for link in ("unshaped", "20mbit"):
        s = json.loads((tmp_path / f"link~{link}" / "summary.json").read_text())
        assert s["status"] == "failed" and "needs root" in s["reason"]
        assert s["world_size"] == 4 and s["nodes"] == 2 and s["params"]["link"] == link
        assert s["extra"]["link_rate_bps"] == netlab.Link(link).rate_bps
        assert s["params"]["max_steps"] == 2


def test_progress_line_is_the_launchers(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(netlab, "available", lambda: "needs root (network namespaces)")
    netlab.main(["--link", "1gbit", "--out", str(tmp_path / "r"), "--max-steps", "2"])
    assert f"[ddpbench] {tmp_path / 'r'}: failed - samples/s (link 1gbit)" in capsys.readouterr().out


def test_a_link_is_read_by_two_node_cells_only_and_checked_by_pattern():
    from ddpbench.core.params import CellConflict, CellParams, ParamError, check_cell, effective_params

    cell = {**CellParams(strategy="allreduce").as_dict(), "link": "100mbit"}
    assert effective_params(cell, nodes=2)["link"] == "100mbit"
    assert effective_params(cell, nodes=1)["link"] == "none"  # one node: one measurement whatever the link
    assert effective_params({**cell, "nodes": 2})["link"] == "100mbit"
    with pytest.raises(CellConflict, match="link 100mbit"):
        check_cell({**cell, "world_size": 4, "nodes": 4})
    for bad in ("fast", "100 mbit", "1gbps", "-1mbit"):
        with pytest.raises(ParamError, match="'link'"):
            CellParams(link=bad)
    assert CellParams(link="2.5gbit").link == "2.5gbit"


def test_launcher_refuses_a_link_without_two_nodes(tmp_path, capsys):
    from ddpbench.run import launch

    with pytest.raises(SystemExit) as e:
        launch.main(["--nproc-per-node", "2", "--out", str(tmp_path / "r"), "--link", "1gbit"])
    assert e.value.code == 2 and "needs --nnodes 2" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_link_cell_without_namespaces_is_skipped_with_the_reason(tmp_path, monkeypatch):
    import json

    from ddpbench.run import launch

    monkeypatch.setattr(netlab, "available", lambda: "needs root (network namespaces)")
    rc = launch.main(["--nproc-per-node", "1", "--nnodes", "2", "--out", str(tmp_path / "r"), "--link", "100mbit"])
    s = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert rc == 0 and s["status"] == "skipped" and "needs root" in s["reason"] and s["params"]["link"] == "100mbit"
