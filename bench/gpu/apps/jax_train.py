"""JAX jit training loop (XLA): an MLP regression trained with plain SGD, 30 steps."""
import os
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
os.environ.setdefault("XLA_FLAGS", "--xla_gpu_deterministic_ops=true")
import jax
import jax.numpy as jnp
from common import digest, finish

key = jax.random.PRNGKey(0)
k1, k2, k3, k4 = jax.random.split(key, 4)
params = {"w1": jax.random.normal(k1, (64, 256)) * 0.1, "b1": jnp.zeros(256),
          "w2": jax.random.normal(k2, (256, 1)) * 0.1, "b2": jnp.zeros(1)}
x = jax.random.normal(k3, (512, 64))
y = jnp.sin(x.sum(axis=1, keepdims=True))


def loss_fn(p, x, y):
    h = jnp.tanh(x @ p["w1"] + p["b1"])
    return jnp.mean((h @ p["w2"] + p["b2"] - y) ** 2)


@jax.jit
def step(p, x, y):
    l, g = jax.value_and_grad(loss_fn)(p, x, y)
    return jax.tree_util.tree_map(lambda a, b: a - 0.05 * b, p, g), l


losses = []
for i in range(30):
    params, l = step(params, x, y)
    losses.append(l)
losses = jnp.stack(losses).block_until_ready()
import numpy as np
finish({"losses": digest(np.asarray(losses)), "w1": digest(np.asarray(params["w1"])),
        "w2": digest(np.asarray(params["w2"]))}, backend=jax.default_backend())
