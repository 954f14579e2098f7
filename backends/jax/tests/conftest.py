"""Give JAX its CPU devices before any test touches it (JAX fixes the count when it starts)."""

from multidev_jax.devices import configure_cpu_devices

configure_cpu_devices()
