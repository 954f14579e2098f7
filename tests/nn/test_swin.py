"""Swin's window attention: the float64 reference against torchvision's own function, and ONNX out and back in.

Why: ``WindowAttention`` states torchvision's ``shifted_window_attention``
(Swin v1) as one layer; its padding, roll, windows, relative position bias
and mask are arithmetic every engine takes from ``multidev.nn.swin``, so
the reference that judges them must compute what torchvision computes,
forward and backward, at sizes that pad, roll, and fit in one window.
"""

import numpy as np
import pytest

from multidev import MultidevError, nn, reference
from multidev.nn import swin
from multidev.reference import tokens
from multidev.rules.models import ModelSpec

#: (height, width, channels, heads, window, shift): padded and rolled; uneven sides; one window (no roll);
#: rolled by 1 of 3; no shift at all
SIZES = [(8, 8, 12, 3, 7, 3), (6, 5, 8, 2, 4, 2), (4, 4, 8, 2, 7, 3), (9, 9, 4, 1, 3, 1), (6, 6, 4, 2, 3, 0)]


@pytest.mark.parametrize("h, w, c, heads, window, shift", SIZES)
def test_the_reference_is_torchvisions_shifted_window_attention(torchvision_models, h, w, c, heads, window, shift):
    import torch
    from torchvision.models.swin_transformer import _get_relative_position_bias, shifted_window_attention

    rng = np.random.default_rng(0)
    arrays = [rng.normal(size=(2, h, w, c)), rng.normal(size=(3 * c, c)) * 0.3, rng.normal(size=3 * c) * 0.1,
              rng.normal(size=(c, c)) * 0.3, rng.normal(size=c) * 0.1,
              rng.normal(size=(swin.table_size(window), heads))]
    x, w_in, b_in, w_out, b_out, table = (torch.tensor(a, requires_grad=True) for a in arrays)
    index = torch.from_numpy(swin.relative_index(window).reshape(-1))
    bias = _get_relative_position_bias(table, index, [window, window])
    want = shifted_window_attention(x, w_in, w_out, bias, [window, window], heads, [shift, shift], 0.0, 0.0, b_in,
                                    b_out, training=False)
    got, cache = tokens.window_attention(*arrays, heads, window, shift)
    assert np.abs(got - want.detach().numpy()).max() <= 1e-13
    dy = rng.normal(size=got.shape)
    want.backward(torch.from_numpy(dy))
    grads = tokens.window_attention_backward(dy, cache)
    for name, g, t in zip(("x", "in_weight", "in_bias", "out_weight", "out_bias", "table"), grads,
                          (x, w_in, b_in, w_out, b_out, table)):
        assert np.abs(g - t.grad.numpy()).max() <= 1e-12 * max(1.0, np.abs(t.grad.numpy()).max()), name


def test_the_mask_keeps_each_region_to_itself():
    """A 14x14 grid of 7x7 windows rolled by 3: the last window holds four regions, the first one."""
    mask = swin.mask(swin.plan(14, 14, 7, 3), 7)
    assert mask.shape == (4, 49, 49)
    assert not mask[0].any()
    regions = [len(np.unique(row)) for row in (mask[3] == 0)]
    assert set(np.unique(mask)) == {0.0, swin.MASKED} and set(regions) == {2}  # each row: its region, or not
    assert swin.plan(4, 4, 7, 3).shift_rows == 0  # one window covers the padded grid: no roll


@pytest.mark.parametrize("layer", [nn.WindowAttention(2, window=4, shift=2),
                                   nn.WindowAttention(1, window=7, shift=3, bias=False),
                                   nn.WindowAttention(2, window=3, shift=1)], ids=["rolled", "one-window", "by-1"])
def test_window_attention_is_written_as_torch_writes_it_and_read_back(tmp_path, layer):
    """to_onnx writes Pad, the roll as slices, windows in the batch, the gathered table and the mask; onnxruntime
    gives the reference's values, and from_onnx reads the nodes back as the one layer."""
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (pip install onnxruntime)")
    net = nn.Sequential(nn.Conv2d(4, 1), nn.Transpose((1, 2, 0)), layer, nn.Flatten(), nn.Dense())
    spec = ModelSpec("swin", (2, 6, 6), 3, net.graph())
    rng = np.random.default_rng(2)  # no array 0 (the biases start so): one read as missing would go unseen
    state = {k: (v + rng.normal(0, 0.1, v.shape)).astype(np.float32) for k, v in spec.init(1).items()}
    nn.to_onnx(spec.graph, state, (2, 6, 6), tmp_path / "swin.onnx")
    x = np.random.default_rng(0).normal(size=(3, 2, 6, 6)).astype(np.float32)
    want = reference.predict(spec, state, x.astype(np.float64))
    session = ort.InferenceSession(str(tmp_path / "swin.onnx"))
    got = session.run(None, {session.get_inputs()[0].name: x})[0]
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
    back = nn.from_onnx(tmp_path / "swin.onnx")
    assert [type(n.layer).__name__ for n in back.nodes] == ["Conv2d", "Transpose", "WindowAttention", "Flatten",
                                                            "Dense"]
    again = ModelSpec("swin", (2, 6, 6), 3, back)
    assert again.params() == spec.params()
    assert np.abs(reference.predict(again, again.init(0), x.astype(np.float64)) - want).max() <= 1e-6


def test_window_attention_refuses_what_it_cannot_compute():
    with pytest.raises(MultidevError, match="shift must be a whole number from 0 to window - 1 \\(6\\), got 7"):
        nn.WindowAttention(2, window=7, shift=7)
    for middle, message in ((nn.Reshape((4, -1)), "needs a grid of tokens \\(H, W, C\\) but gets \\(4, 36\\)"),
                            (nn.Transpose((1, 2, 0)), "splits 4 features into 3 heads")):
        net = nn.Sequential(nn.Conv2d(4, 1), middle, nn.WindowAttention(3, window=4), nn.Flatten(), nn.Dense())
        with pytest.raises(MultidevError, match=message) as err:
            ModelSpec("swin", (2, 6, 6), 3, net.graph())
        assert "\n" not in str(err.value)
