"""/sys/class/powercap as the kernel lays it out, in a test's folder: what tests/unit/test_energy.py and
tests/integration/test_energy_run.py read the RAPL counters from (core.energy.POWERCAP_ENV)."""

RANGE = 262143328850  # max_energy_range_uj as a Xeon reports it


def powercap(tmp_path, zones: dict[str, tuple[str, int]]):
    """/sys/class/powercap as the kernel lays it out: each zone a directory of the device tree (a sub-zone
    inside its package), linked from the class folder; `zones`: zone -> (name, energy_uj)."""
    devices = tmp_path / "devices" / "virtual" / "powercap" / "intel-rapl"
    klass = tmp_path / "class" / "powercap"
    klass.mkdir(parents=True)
    devices.mkdir(parents=True)
    (klass / "intel-rapl").symlink_to(devices)
    for zone, (name, uj) in zones.items():
        parent = zone.rsplit(":", 1)[0]
        folder = devices / zone if zone.count(":") == 1 else devices / parent / zone
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "name").write_text(name + "\n")
        (folder / "energy_uj").write_text(f"{uj}\n")
        (folder / "max_energy_range_uj").write_text(f"{RANGE}\n")
        (folder / "enabled").write_text("1\n")
        (klass / zone).symlink_to(folder)
    return klass


def set_energy(root, zone: str, uj: int) -> None:
    (root / zone / "energy_uj").write_text(f"{uj}\n")
