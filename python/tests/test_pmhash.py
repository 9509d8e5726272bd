"""Tests of the pmhash Python package (python/): the dict protocol on every kind against a dict
oracle, the three key spaces, exceptions, reopening, a kill -9 of a writing process, threads."""
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading

import pytest

import pmhash

TMP = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
KINDS = pmhash.kinds()
SMALL = 64 << 20


@pytest.fixture
def path():
    p = tempfile.mktemp(prefix="pmhash-py-", suffix=".pool", dir=TMP)
    yield p
    if os.path.exists(p):
        os.unlink(p)


def test_kinds_describe_their_apis():
    names = {k["name"]: k for k in KINDS}
    assert {"reh", "reh-kv", "pea", "pea-kv", "turbo", "smartht", "elimda", "pea-multi"} <= set(names)
    assert names["reh-kv"]["bytes"] and not names["reh"]["bytes"]
    assert names["pea-multi"]["multi"]
    assert all(k["paper"] for k in KINDS)


def test_bytes_kind_dict_protocol(path):
    with pmhash.open(path, "reh-kv", pool_size=SMALL) as db:
        assert db.kind == "reh-kv" and db.durability == "adr" and db.key_space == "bytes"
        db[b"a"] = b"1"
        db["text"] = "é"  # str is UTF-8
        db[b"bin\x00key"] = bytearray(b"\x00\xff")
        db[7] = 9  # ints: 8 little-endian bytes
        assert db[b"a"] == b"1"
        assert db[b"text"] == "é".encode()
        assert db[b"bin\x00key"] == b"\x00\xff"
        assert db[(7).to_bytes(8, "little")] == (9).to_bytes(8, "little")
        assert db.get(b"nope") is None and db.get(b"nope", 5) == 5
        with pytest.raises(KeyError) as missing:
            db[b"nope"]
        assert missing.value.args == (b"nope",)  # the key itself, as a dict's KeyError
        assert b"a" in db and b"nope" not in db
        assert len(db) == 4
        with pytest.raises(pmhash.ExistsError) as e:
            db.insert(b"a", b"2")
        assert isinstance(e.value, KeyError)
        assert db[b"a"] == b"1"
        db.insert(b"b", b"2")
        with pytest.raises(KeyError):
            db.replace(b"zz", b"1")
        db.replace(b"b", b"3")
        db.update({b"u1": b"x"}, u2=b"y")
        db.update([(b"u3", b"z")])
        assert db.get_many([b"u1", b"u2", b"u3"]) == [b"x", b"y", b"z"]
        assert db.pop(b"u1") == b"x" and b"u1" not in db
        assert db.pop(b"u1", None) is None
        with pytest.raises(KeyError):
            db.pop(b"u1")
        for k in (b"u2", b"u3"):
            del db[k]
        assert db.get_many([b"a", b"zz", b"b"], default=b"-") == [b"1", b"-", b"3"]
        del db[b"a"]
        with pytest.raises(KeyError):
            del db[b"a"]
        assert sorted(db.keys()) == sorted([b"text", b"bin\x00key", (7).to_bytes(8, "little"), b"b"])
        assert dict(db.items())[b"b"] == b"3"
        assert sorted(db) == sorted(db.keys())
        assert len(db.values()) == len(db)
        with pytest.raises(TypeError):
            db[1.5] = b"x"
        db.check()
    assert db.closed
    with pytest.raises(ValueError):
        len(db)


def test_uint64_kind_takes_ints(path):
    with pmhash.open(path, "pea", pool_size=SMALL) as db:
        assert db.key_space == "uint64"
        db[1] = 2
        db[2**64 - 1] = 2**64 - 1
        assert db[1] == 2 and db[2**64 - 1] == 2**64 - 1
        with pytest.raises(TypeError) as e:
            db[b"x"] = 1
        assert "reh-kv" in str(e.value)  # names the kinds with bytes keys
        with pytest.raises(ValueError):
            db[-1] = 1
        with pytest.raises(ValueError):
            db[2**64] = 1
        with pytest.raises(TypeError):
            db[True] = 1
        assert b"x" not in db and "x" not in db  # `in` never raises
        assert db.get_many([1, 3]) == [2, None]
        db.update({5: 6, 7: 8})
        assert db.pop(5) == 6 and db.get(7) == 8
        # int pairs go in WriteBatches of 64: more than one batch, a key twice (the last wins)
        db.update([(k, k * 3) for k in range(1000, 1200)] + [(1000, 1)])
        assert db.get_many([1000, 1001, 1199, 1200]) == [1, 3003, 3597, None]
        with pytest.raises(TypeError):
            db.update(x=1)  # keyword keys are str: not a uint64 key


def test_multi_value_kind(path):
    with pmhash.open(path, "pea-multi", pool_size=SMALL) as db:
        assert db.key_space == "multi"
        for v in (3, 1, 2, 2):
            db.add(10, v)
        assert db[10] == [1, 2, 2, 3]
        assert db.count(10) == 4 and len(db) == 4
        db.remove(10, 2)
        assert db[10] == [1, 2, 3]
        with pytest.raises(KeyError):
            db.remove(10, 99)
        with pytest.raises(pmhash.NotSupportedError):
            db[10] = 1
        db.add(11, 5)
        assert sorted(db.keys()) == [10, 11]
        del db[10]
        assert 10 not in db and db.count(10) == 0
    with pmhash.open(path) as db:
        assert db.kind == "pea-multi" and db[11] == [5]
        with pytest.raises(pmhash.NotSupportedError):
            db.get_many([11])


@pytest.mark.parametrize("kind", [k["name"] for k in KINDS])
def test_every_kind_against_a_dict(path, kind):
    info = next(k for k in KINDS if k["name"] == kind)
    rng = random.Random(3)
    with pmhash.open(path, kind, pool_size=SMALL) as db:
        if info["multi"]:
            oracle = {}
            for _ in range(3000):
                k, v = rng.randrange(200), rng.randrange(8)
                if rng.random() < 0.6:
                    db.add(k, v)
                    oracle.setdefault(k, []).append(v)
                elif oracle.get(k):
                    v = rng.choice(oracle[k])
                    db.remove(k, v)
                    oracle[k].remove(v)
            for k, vs in oracle.items():
                assert db.get(k, []) == sorted(vs)
            assert len(db) == sum(len(vs) for vs in oracle.values())
        else:
            def key(i):
                return b"k%d" % i if info["bytes"] else i

            def val(i):
                return b"v%d" % i if info["bytes"] else i

            oracle = {}
            for _ in range(4000):
                k, v = key(rng.randrange(500)), val(rng.randrange(10**6))
                op = rng.random()
                if op < 0.5:
                    db[k] = v
                    oracle[k] = v
                elif op < 0.7:
                    assert db.get(k) == oracle.get(k)
                elif k in oracle:
                    del db[k]
                    del oracle[k]
                else:
                    with pytest.raises(KeyError):
                        del db[k]
            assert dict(db.items()) == oracle
            assert len(db) == len(oracle)
            keys = list(oracle)[:50]
            assert db.get_many(keys) == [oracle[k] for k in keys]
        db.check()
    # Reopened as the pool describes itself.
    with pmhash.open(path) as db:
        assert db.kind == kind
        assert not db.stats()["recovered"]
        # Every kind but plain pea loads the DRAM state its clean Close saved (pea's open reads
        # only its directory).
        saving = ("reh", "reh-kv", "smartht", "smartht-kv", "elimda", "elimda-kv", "turbo",
                  "turbo-kv", "pea-kv", "pea-multi")
        assert db.stats()["state_loaded"] == (kind in saving)
        db.check()


def test_reopen_and_stats(path):
    with pmhash.open(path, "turbo-kv", pool_size=SMALL, counters=True) as db:
        for i in range(1000):
            db[b"%d" % i] = b"x" * (i % 40)
        s = db.stats()
        assert s["size"] == 1000 and s["kind"] == "turbo-kv"
        assert s["traffic"]["persists"] > 0
        assert isinstance(s["details"], dict)
    with pmhash.open(path, "turbo-kv", create=False) as db:
        assert len(db) == 1000 and db[b"999"] == b"x" * (999 % 40)


def test_errors(path):
    with pytest.raises(FileNotFoundError):
        pmhash.open(path)
    with pytest.raises(FileNotFoundError):
        pmhash.open(path, "reh", create=False)
    with pytest.raises(ValueError):
        pmhash.open(path, "no-such-kind")
    with pytest.raises(ValueError):
        pmhash.open(path, "reh", durability="fast")
    with pytest.raises(TypeError):
        pmhash.open(path, "reh", bogus=1)
    with open(path, "wb") as f:
        f.write(b"not a pool" * 1000)
    with pytest.raises(pmhash.CorruptionError):
        pmhash.open(path)
    os.unlink(path)
    db = pmhash.open(path, "reh", pool_size=SMALL)
    with pytest.raises(pmhash.BusyError) as e:
        pmhash.open(path)
    assert isinstance(e.value, OSError)
    db.close()
    db.close()  # idempotent
    with pytest.raises(ValueError):
        db[1] = 1
    assert "closed" in repr(db)


def test_kill_9_keeps_every_acknowledged_write(path):
    child = subprocess.Popen(
        [sys.executable, "-c", """
import sys, pmhash
db = pmhash.open(sys.argv[1], "smartht-kv", pool_size=64 << 20)
print("ready", flush=True)
i = 0
while True:
    db[b"key%d" % i] = b"value%d" % i
    print(i, flush=True)
    i += 1
""", path], stdout=subprocess.PIPE, text=True, env=dict(os.environ))
    assert child.stdout.readline().strip() == "ready"
    acked = -1
    while acked < 3000:
        acked = int(child.stdout.readline())
    child.send_signal(signal.SIGKILL)
    child.wait()
    for line in child.stdout:  # acknowledgements still in the pipe
        if line.strip():
            acked = int(line)
    with pmhash.open(path) as db:
        assert db.stats()["recovered"]
        for i in range(acked + 1):
            assert db[b"key%d" % i] == b"value%d" % i
        assert len(db) in (acked + 1, acked + 2)  # the write in flight: either way
        db.check()


def test_threads_share_a_pool(path):
    with pmhash.open(path, "reh", pool_size=SMALL) as db:
        def work(t):
            for i in range(2000):
                db[t * 100000 + i] = i
                assert db[t * 100000 + i] == i
        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(db) == 8000


def _advised(pool_path):
    """Whether this process maps pool_path advised MADV_HUGEPAGE ("hg" in its smaps VmFlags)."""
    with open("/proc/self/smaps") as f:
        lines = f.read().splitlines()
    found, advised, inside = False, False, False
    for line in lines:
        head = line.split()
        if head and "-" in head[0] and ":" not in head[0]:  # a mapping's header line
            inside = line.endswith(pool_path) or line.endswith(pool_path + " (deleted)")
            found = found or inside
        elif inside and line.startswith("VmFlags:"):
            advised = advised or "hg" in line.split()[1:]
    assert found, "the pool is not mapped"
    return advised


def test_huge_pages_option_advises_the_mapping(path):
    thp = "/sys/kernel/mm/transparent_hugepage/enabled"
    if not os.path.exists(thp) or "[never]" in open(thp).read():
        pytest.skip("no transparent huge pages on this kernel")
    for huge in (False, True):
        with pmhash.open(path, "reh", pool_size=SMALL, huge_pages=huge) as db:
            db[1] = 2
            assert _advised(path) == huge
            assert db[1] == 2
        os.unlink(path)
