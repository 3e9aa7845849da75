"""The noise rule of benchmarks/machine.py on a peer the CPU itself cripples: fbgemm's JIT
row-wise Adagrad mixes legacy SSE with AVX, and where this CPU charges heavily for that mix
the TorchRec / TBE peers' rates are refused (the run is noisy) and never become references."""
from __future__ import annotations

import json
import os
import platform
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks import machine  # noqa: E402


@pytest.mark.skipif(platform.machine() != "x86_64" or shutil.which("cc") is None, reason="the probe is x86-64 C")
def test_the_probe_measures_both_forms_on_this_cpu():
    probe = machine.sse_avx_mix_penalty()
    if probe is None:
        pytest.skip("no AVX on this CPU")
    assert probe["legacy_ns"] > 0 and probe["vex_ns"] > 0
    assert probe["ratio"] == pytest.approx(probe["legacy_ns"] / probe["vex_ns"])


@pytest.mark.parametrize("penalty, crippled", [(31.0, True), (1.05, False), (None, False)])
def test_a_crippled_peer_makes_the_run_noisy_and_is_never_a_reference(tmp_path, monkeypatch, penalty, crippled):
    rates = tmp_path / "reference_rates.json"
    monkeypatch.setenv(machine.REFERENCE_RATES_ENV, str(rates))
    # the machine's fact given, not measured: the rule under test is what finish() makes of it
    monkeypatch.setattr(machine, "sse_avx_mix_penalty",
                        lambda: None if penalty is None else {"ratio": penalty, "legacy_ns": penalty, "vex_ns": 1.0})
    check = machine.NoiseCheck("noise-rule-test")
    check.load_start = 0.0  # a quiet start: references are recorded where the rule allows
    speed = machine.speed_reference(loops=1, repeats=1)
    check.speed_start = speed
    monkeypatch.setattr(machine, "speed_reference", lambda *a, **k: speed)  # the fixed loop steady at both ends
    monkeypatch.setattr(machine.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    got = check.finish({"torchrec_fused@1": 30e3, "embeddingbag@1": 35e3})
    refs = json.loads(rates.read_text())[machine.machine_key()]["noise-rule-test"]
    assert "embeddingbag@1" in refs  # the peer the CPU does not cripple: recorded as usual
    assert ("torchrec_fused@1" in refs) is not crippled
    reasons = [w for w in got["noisy_because"] if w.startswith("torchrec_fused@1: fbgemm's JIT")]
    assert bool(reasons) is crippled
    assert got["verdict"] == ("noisy" if crippled else "accepted")
    assert got["sse_avx_mix_penalty"] == (None if penalty is None else {"ratio": penalty, "legacy_ns": penalty,
                                                                        "vex_ns": 1.0})


def test_a_benchmark_loading_the_machine_itself_still_records_its_first_reference(tmp_path, monkeypatch):
    """Quiet at the start, the fixed loop steady at the end, the end's load its own (2.6, as
    trial_cost's two threads leave it on two cores): its rates become the references; a
    start above the load limit records none."""
    rates = tmp_path / "reference_rates.json"
    monkeypatch.setenv(machine.REFERENCE_RATES_ENV, str(rates))
    speed = machine.speed_reference(loops=1, repeats=1)
    monkeypatch.setattr(machine, "speed_reference", lambda *a, **k: speed)
    monkeypatch.setattr(machine.os, "getloadavg", lambda: (2.6, 2.0, 1.0))
    busy = machine.NoiseCheck("self-loading")
    busy.load_start = 1.6  # not quiet at the start: nothing recorded
    assert busy.finish({"plain training rows/s": 40e3})["references_recorded"] == []
    assert not rates.exists()
    check = machine.NoiseCheck("self-loading")
    check.load_start = 0.4
    got = check.finish({"plain training rows/s": 40e3})
    assert got["references_recorded"] == ["machine_speed", "plain training rows/s"]
    assert got["verdict"] == "accepted" and got["load_average"]["end"] == 2.6


def test_two_cpus_of_one_model_name_keep_references_of_their_own(tmp_path, monkeypatch):
    """Both read "AMD EPYC"; one is family 25 model 17 with AVX-512, the other an AVX2 part.
    A reference recorded on one is never the other's yardstick: the second has none of its
    own, so its first quiet run records them (a key of the name alone would judge its 300
    loops/s against the first one's 1,200: refused)."""
    rates = tmp_path / "reference_rates.json"
    monkeypatch.setenv(machine.REFERENCE_RATES_ENV, str(rates))
    monkeypatch.setattr(machine.os, "getloadavg", lambda: (0.1, 0.1, 0.1))
    speed = {"now": 1200.0}
    monkeypatch.setattr(machine, "speed_reference", lambda *a, **k: speed["now"])
    keys = {}
    name = "model name\t: AMD EPYC\n"
    for cpuinfo, loop in ((name + "cpu family\t: 23\nmodel\t\t: 49\nflags\t\t: avx avx2\n", 1200.0),
                          (name + "cpu family\t: 25\nmodel\t\t: 17\nflags\t\t: avx avx2 avx512f\n", 300.0)):
        monkeypatch.setattr(machine, "_cpuinfo", lambda info=cpuinfo: info)  # the machine's /proc/cpuinfo
        speed["now"] = loop
        check = machine.NoiseCheck("two-cpus")
        got = check.finish({"peer@1": loop * 100})
        assert got["verdict"] == "accepted", got["noisy_because"]  # its own first quiet run: its references
        assert got["references_recorded"] == ["machine_speed", "peer@1"]
        keys[loop] = machine.machine_key()
    assert keys[1200.0] == f"{os.cpu_count()} cores (AMD EPYC; family 23 model 49, AVX2)"
    assert keys[300.0] == f"{os.cpu_count()} cores (AMD EPYC; family 25 model 17, AVX-512)"
    refs = json.loads(rates.read_text())
    assert refs[keys[1200.0]]["machine_speed"] == 1200.0 and refs[keys[300.0]]["machine_speed"] == 300.0
