"""The CPU's convolution forms: a depthwise convolution written as its taps computes XLA's convolution."""

import numpy as np
import pytest

pytest.importorskip("jax")

CASES = [((2, 9, 9, 6), 3, 1, ((1, 1), (1, 1)), (1, 1)),     # MobileNet's 3x3, stride 1
         ((2, 9, 8, 6), 3, 2, ((1, 1), (1, 1)), (1, 1)),     # stride 2 on an odd and an even side
         ((2, 11, 11, 4), 5, 2, ((2, 2), (2, 2)), (1, 1)),   # EfficientNet's 5x5
         ((1, 10, 10, 3), 3, 1, ((2, 2), (2, 2)), (2, 2)),   # dilated
         ((2, 7, 7, 5), 3, 2, ((0, 1), (1, 0)), (1, 1))]     # uneven padding, as ONNX's auto_pad gives


@pytest.mark.parametrize("shape, size, stride, padding, dilation", CASES)
def test_a_depthwise_convolution_as_its_taps_is_xlas_convolution(shape, size, stride, padding, dilation):
    """float64, forward and both gradients, to rounding (the taps add in another order)."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    from multidev_jax.conv import _NHWC_HWIO, conv_general_dilated
    from multidev_jax.parallel import x64

    def through(conv):
        def run(x, w):
            return conv(x, w, (stride, stride), padding, rhs_dilation=dilation, dimension_numbers=_NHWC_HWIO,
                        feature_group_count=shape[-1])
        return run

    def xla(x, w, *args, **kwargs):
        return lax.conv_general_dilated(x, w, *args, precision=lax.Precision.HIGHEST, **kwargs)

    rng = np.random.default_rng(0)
    x, w = rng.normal(size=shape), rng.normal(size=(size, size, 1, shape[-1]))
    with x64():
        for name, conv in (("taps", conv_general_dilated), ("xla", xla)):
            lowered = jax.jit(through(conv)).lower(jnp.asarray(x), jnp.asarray(w)).as_text()
            assert ("feature_group_count" in lowered) == (name == "xla"), name
        want = through(xla)(x, w)
        got = through(conv_general_dilated)(jnp.asarray(x), jnp.asarray(w))
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-13)
        grads = [jax.grad(lambda x, w, c=c: jnp.sum(jnp.sin(through(c)(x, w))), argnums=(0, 1))(x, w)
                 for c in (conv_general_dilated, xla)]
        for got, want in zip(*grads):
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_bfloat16_and_channel_multipliers_keep_xlas_convolution():
    import jax
    import jax.numpy as jnp

    from multidev_jax.conv import _NHWC_HWIO, conv_general_dilated

    def program(x, w):
        return jax.jit(lambda x, w: conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1)), dimension_numbers=_NHWC_HWIO,
                                                         feature_group_count=4)).lower(x, w).as_text()
    assert "feature_group_count = 4" in program(jnp.ones((1, 5, 5, 4), jnp.bfloat16), jnp.ones((3, 3, 1, 4),
                                                                                               jnp.bfloat16))
    assert "feature_group_count = 4" in program(jnp.ones((1, 5, 5, 4)), jnp.ones((3, 3, 1, 8)))  # 2 per channel
