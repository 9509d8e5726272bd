"""pmhash: persistent-memory hash indexes from the research literature, from Python.

    import pmhash

    with pmhash.open("/dev/shm/users.pool", "reh-kv") as db:   # created if missing
        db[b"user:42"] = b'{"name": "Ada"}'
        print(db[b"user:42"], len(db))

    with pmhash.open("/dev/shm/users.pool") as db:            # an existing pool: any kind
        print(db.kind, db.get(b"user:42"), db.stats()["recovered"])

A Pool is dict-like (get, [], in, del, len, items, keys, values, iteration, update, pop) plus
insert() and replace() (which raise ExistsError / KeyError instead of overwriting / adding),
get_many() (many keys, one call), stats(), check() and close(); a `with` block closes it. Keys and values are
bytes on the kinds with variable-size keys (every "-kv" kind; str is taken as UTF-8, an int as
its 8 little-endian bytes) and ints in [0, 2**64) on the others; on a multi-value pool
("pea-multi") pool[k] is the sorted list of k's values, add(k, v) and remove(k, v) change one
pair. Every write is durable when it returns (on adr and eadr pools).
"""
import os as _os

from . import _pmhash
from ._pmhash import (BusyError, CorruptionError, Error, ExistsError, NotSupportedError,
                      OutOfSpaceError, Pool, kinds)

__all__ = ["open", "kinds", "Pool", "Error", "ExistsError", "CorruptionError",
           "OutOfSpaceError", "BusyError", "NotSupportedError"]


def open(path, kind=None, **options):  # noqa: A001 (shadows the builtin on purpose, as gzip.open)
    """Opens the pool at `path`.

    kind=None opens an existing pool as it describes itself (kind, durability, parameters);
    FileNotFoundError if there is none. With a kind ("reh", "pea-kv", ...: see kinds()), a
    missing pool is created (create=False: only open). Options: durability ("adr", "eadr",
    "dram"; default: the pool's, adr for a new one), pool_size (bytes, for a new pool; default
    1 GiB, sparse), create, counters (count persists and fences: stats()["traffic"]),
    background_threads, huge_pages (advise the mapping MADV_HUGEPAGE: 2 MiB pages on a tmpfs
    mounted with huge=advise or huge=always).
    """
    return _pmhash.open(_os.fspath(path), kind, **options)
