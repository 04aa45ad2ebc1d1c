# The script that recorded tests/storage/data/v2_recorded.db with the schema-v2 build (main at
# c028159): cd /tmp/pl && DYNAMO_TRACE=/tmp/pl/v2_recorded.db python3 v2_script.py, then
# sqlite3 v2_recorded.db "VACUUM INTO 'data/v2_recorded.db'" and PRAGMA journal_mode=wal on the copy
import torch
import dynamo


@dynamo.optimize("eager")
def f(x, n):
    y = x * n
    print("break")
    return y + 1


f(torch.ones(2), 2)
f(torch.ones(2), 2)
f(torch.ones(3), 2)   # recompile: size of x
f(torch.ones(3), 3)   # recompile: n changed
