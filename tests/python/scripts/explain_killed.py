# dynamo-explain end-to-end input (tests/python/test_explain_cli.py): the process is killed
# after one compile, so its trace run is never closed and its batched records are lost. The
# report must say that the run did not finish cleanly, not advise as if nothing compiled.
import os
import signal

import torch


def f(x):
    y = x + 1
    print("in f")
    return y * 2


f(torch.ones(2))
os.kill(os.getpid(), signal.SIGKILL)
