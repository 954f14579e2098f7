import re
import warnings

import pytest

from multidev import Device, MultidevError, resolve_devices
from multidev.rules.devices import DeviceFallbackWarning


def test_names_round_trip():
    assert str(Device.parse("gpu:1")) == "gpu:1"
    assert Device.parse(" CPU:0 ") == Device("cpu", 0)


@pytest.mark.parametrize("bad", ["tpu:0", "cpu", "cpu:-1", "gpu:x", ""])
def test_bad_names(bad):
    message = f"bad device name '{re.escape(bad)}': write kind:index, e.g. cpu:0 or gpu:1"
    with pytest.raises(MultidevError, match=f"^{message}$"):
        Device.parse(bad)


def test_devices_count_gives_virtual_cpus():
    assert resolve_devices(devices=3) == [Device("cpu", i) for i in range(3)]
    assert resolve_devices(devices="2") == [Device("cpu", 0), Device("cpu", 1)]
    assert resolve_devices(devices="cpu:0,cpu:1") == [Device("cpu", 0), Device("cpu", 1)]
    assert resolve_devices() == [Device("cpu", 0)]


@pytest.mark.parametrize("request_, wanted", [
    ({}, 1), ({"devices": 3}, 3), ({"devices": "2"}, 2), ({"devices": "cpu:0,cpu:5"}, 6), ({"devices": "gpu:1"}, 1),
    ({"gpus": 4}, 4),  # GPUs may fall back to as many CPU devices
])
def test_the_cpu_devices_a_request_can_name(request_, wanted):
    from multidev.rules.devices import cpu_devices_wanted

    assert cpu_devices_wanted(**request_) == wanted


def test_gpus_fall_back_with_one_warning():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        chosen = resolve_devices(gpus=2, gpu_count=0)
    assert chosen == [Device("cpu", 0), Device("cpu", 1)]
    assert [w.category for w in caught] == [DeviceFallbackWarning]
    assert "2 virtual CPU devices" in str(caught[0].message)


def test_gpus_used_when_present():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert resolve_devices(gpus=2, gpu_count=4) == [Device("gpu", 0), Device("gpu", 1)]


@pytest.mark.parametrize("kwargs, message", [
    (dict(devices=0), "devices must be at least 1, got 0: ask for one device or more"),
    (dict(devices=-1), "devices must be at least 1, got -1: ask for one device or more"),
    (dict(gpus=0), "gpus must be at least 1, got 0: ask for one device or more"),
    (dict(devices="cpu:0,cpu:0"), "devices repeat a name: cpu:0, cpu:0"),
    (dict(devices=["gpu:0"]), r"gpu:0 asked for but this engine sees 0 GPU\(s\): use --gpus to fall back"),
    (dict(devices=3, max_cpu=2), r"3 CPU devices asked for but this engine offers 2 in this process \(`multidev "
                                 r"backends` shows the limit\): ask for fewer"),
    (dict(devices=3, max_cpu=2, cpu_note=lambda: "2 (set by an earlier run)"),
     r"3 CPU devices asked for but this engine offers 2 in this process \(its CPU devices: 2 \(set by an earlier "
     r"run\)\): ask for fewer"),
    (dict(gpus=1, devices=1), "give either gpus or devices, not both"),
    (dict(devices=1.5), "devices must be a whole number, got 1.5"),
])
def test_impossible_requests(kwargs, message):
    with pytest.raises(MultidevError, match=f"^{message}"):
        resolve_devices(**kwargs)
