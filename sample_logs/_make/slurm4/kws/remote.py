"""Client side of the CPU data server (data_server.py): batches arrive over a socket."""

from __future__ import annotations

import logging
import time
from multiprocessing.connection import Client

import torch

log = logging.getLogger("kws.remote")


class RemoteBatches:
    def __init__(self, address, authkey, rank, batch_size, connect_timeout_s=60):
        host, port = address.rsplit(":", 1)
        self.addr = (host, int(port))
        self.authkey = authkey.encode()
        self.rank, self.batch_size = rank, batch_size
        deadline = time.time() + connect_timeout_s
        while True:
            try:
                self.conn = Client(self.addr, authkey=self.authkey)
                break
            except ConnectionRefusedError:
                if time.time() > deadline:
                    raise
                time.sleep(1.0)
        self.conn.send(("hello", rank))
        info = self.conn.recv()
        log.info("connected to data server %s:%d (%s)", *self.addr, info)

    def __iter__(self):
        while True:
            self.conn.send(("next", self.rank, self.batch_size))
            feats, lens, labels = self.conn.recv()
            yield torch.from_numpy(feats), torch.from_numpy(lens), torch.from_numpy(labels)

    def close(self):
        try:
            self.conn.send(("bye", self.rank))
            self.conn.close()
        except OSError:
            pass
