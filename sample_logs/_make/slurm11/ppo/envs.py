"""A tiny grid-world environment (numpy only) and a SubprocVecEnv-style vectorised wrapper."""
import multiprocessing as mp
import numpy as np


class GridWorld:
    """Agent starts in a random free cell and must reach the goal. Obs = flattened one-hot
    planes (agent, goal, walls) of the grid."""
    MOVES = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]])

    def __init__(self, size=6, walls=(), slip_prob=0.0, max_steps=40, seed=0):
        self.size = int(size)
        self.walls = {tuple(w) for w in walls}
        self.slip_prob = float(slip_prob)
        self.max_steps = int(max_steps)
        self.rng = np.random.default_rng(seed)
        self.goal = (self.size - 1, self.size - 1)
        self.pos = (0, 0)
        self.t = 0

    @property
    def obs_dim(self):
        return 3 * self.size * self.size

    def _obs(self):
        o = np.zeros((3, self.size, self.size), dtype=np.float32)
        o[0][self.pos] = 1.0
        o[1][self.goal] = 1.0
        for w in self.walls:
            o[2][w] = 1.0
        return o.reshape(-1)

    def reset(self):
        while True:
            p = tuple(self.rng.integers(0, self.size, size=2))
            if p not in self.walls and p != self.goal:
                break
        self.pos, self.t = p, 0
        return self._obs()

    def step(self, action):
        a = int(action)
        if self.slip_prob > 0 and self.rng.random() < self.slip_prob:
            # slip sideways: rotate to the neighbouring action
            a = a + 1
        move = self.MOVES[a]
        nxt = (int(np.clip(self.pos[0] + move[0], 0, self.size - 1)),
               int(np.clip(self.pos[1] + move[1], 0, self.size - 1)))
        if nxt not in self.walls:
            self.pos = nxt
        self.t += 1
        done = self.pos == self.goal
        reward = 1.0 if done else -0.01
        truncated = self.t >= self.max_steps
        obs = self._obs()
        if done or truncated:
            obs = self.reset()
        return obs, reward, bool(done or truncated)


def _worker(remote, parent_remote, env_kwargs):
    parent_remote.close()
    env = GridWorld(**env_kwargs)
    while True:
        cmd, data = remote.recv()
        if cmd == "step":
            remote.send(env.step(data))
        elif cmd == "reset":
            remote.send(env.reset())
        elif cmd == "close":
            remote.close()
            break


class SubprocVecEnv:
    def __init__(self, env_kwargs_list):
        ctx = mp.get_context("fork")
        self.n = len(env_kwargs_list)
        self.remotes, work_remotes = zip(*[ctx.Pipe() for _ in range(self.n)])
        self.procs = []
        for wr, r, kw in zip(work_remotes, self.remotes, env_kwargs_list):
            p = ctx.Process(target=_worker, args=(wr, r, kw), daemon=True)
            p.start()
            self.procs.append(p)
            wr.close()

    def reset(self):
        for r in self.remotes:
            r.send(("reset", None))
        return np.stack([r.recv() for r in self.remotes])

    def step(self, actions):
        for r, a in zip(self.remotes, actions):
            r.send(("step", a))
        res = [r.recv() for r in self.remotes]
        obs, rew, done = zip(*res)
        return np.stack(obs), np.array(rew, dtype=np.float32), np.array(done, dtype=np.float32)

    def close(self):
        for r in self.remotes:
            try:
                r.send(("close", None))
            except (BrokenPipeError, EOFError):
                pass
        for p in self.procs:
            p.join(timeout=2)
