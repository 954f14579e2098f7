"""CPU kinds: what the engines' shipped forms and the benchmarks' results are kept by."""

import pytest

from multidev.engines.cpu_kind import cpu_kind, first_processor, this_cpu_kind

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC 9R14
flags\t\t: fpu avx2 avx512f

processor\t: 1
vendor_id\t: AuthenticAMD
"""


@pytest.mark.parametrize("vendor, name, family, model, flags, kind", [
    ("AuthenticAMD", "AMD EPYC 7R13", 25, 1, {"avx2"}, "amd-epyc-zen3"),
    ("AuthenticAMD", "AMD EPYC 9R14", 25, 17, {"avx2", "avx512f"}, "amd-epyc-zen4"),
    ("AuthenticAMD", "AMD Ryzen 9 9950X", 26, 68, {"avx512f"}, "amd-ryzen-zen5"),
    ("GenuineIntel", "Intel(R) Xeon(R) Platinum 8488C", 6, 143, {"avx512f", "amx_tile"}, "intel-xeon-amx"),
    ("GenuineIntel", "Intel(R) Core(TM) i7-9700", 6, 158, {"avx2"}, "intel-avx2"),
    ("", "", None, None, set(), None),
])
def test_a_cpu_is_named_by_vendor_brand_and_generation_or_vector_units(vendor, name, family, model, flags, kind):
    got = cpu_kind(vendor, name, family, model, frozenset(flags))
    assert got == (kind or got) and got  # an unknown vendor: the platform's name, never empty


def test_the_first_processor_is_read_and_this_cpu_has_a_kind():
    fields = first_processor(CPUINFO)
    assert (fields["vendor_id"], fields["model"], fields["model name"]) == ("AuthenticAMD", "17", "AMD EPYC 9R14")
    assert this_cpu_kind() and " " not in this_cpu_kind()
