"""Starts a thread when imported: a fork server that imports it as an optional preload must
refuse to fork (tests/python/test_minify_fork_server.py)."""
import threading
import time

threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
