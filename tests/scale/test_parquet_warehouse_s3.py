"""The Parquet warehouse on an ``s3://`` root, against moto's S3 server on localhost (offline): two writer
processes of different partitions, a failed and a killed writer leaving the previous version of their
partition readable, and DuckDB views reading the S3 files through the root's fsspec filesystem."""

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import duckdb
import polars as pl
import pytest

from resources.parquet_warehouse import (
    ParquetViewsResource,
    ParquetWarehouseIOManager,
    connect_views,
    partition_file,
    refresh_views,
    write_partition,
)
from tests.scale.test_parquet_warehouse import _KILL_WRITER, _frame, _write, scores, scores_seen, two_writer_processes

moto_server = pytest.importorskip("moto.server")
s3fs = pytest.importorskip("s3fs")

BUCKET = "noisycal-test"


@pytest.fixture(scope="module")
def endpoint():
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    saved = {k: os.environ.get(k) for k in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                             "AWS_DEFAULT_REGION")}
    # inherited by the writer processes below; botocore reads the endpoint from AWS_ENDPOINT_URL
    os.environ.update(AWS_ENDPOINT_URL=url, AWS_ACCESS_KEY_ID="test", AWS_SECRET_ACCESS_KEY="test",
                      AWS_DEFAULT_REGION="us-east-1")
    s3fs.S3FileSystem.clear_instance_cache()
    s3fs.S3FileSystem().mkdir(BUCKET)
    try:
        yield url
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        server.stop()


@pytest.fixture
def root(endpoint, request):
    return f"s3://{BUCKET}/{request.node.name}"


def _s3_view(tmp_path, root: str, query: str) -> pl.DataFrame:
    with connect_views(tmp_path / "warehouse.duckdb", root) as con:
        return con.execute(query).pl()


def _read(root: str, table: str, key: str) -> pl.DataFrame:
    with s3fs.S3FileSystem().open(f"{root}/cleaning/{table}/{partition_file(key)}", "rb") as fh:
        return pl.read_parquet(fh)


def test_io_manager_round_trip_and_views_read_s3(tmp_path, root):
    manager = ParquetWarehouseIOManager(database=str(tmp_path / "warehouse.duckdb"), root=root)
    _write(manager, "v1", _frame("v1", 5, 1))
    _write(manager, "v2", _frame("v2", 3, 2))
    _write(manager, "v1", _frame("v1", 4, 7))  # replaces v1's object only
    query = "select model_version, count(*), min(tag) from calibration.scores group by 1 order by 1"
    got = _s3_view(tmp_path, root, query)
    assert got.rows() == [("v1", 4, 7), ("v2", 3, 2)]
    files = sorted(p.rsplit("/", 1)[1] for p in s3fs.S3FileSystem().ls(f"{root}/calibration/scores"))
    assert files == [partition_file("v1"), partition_file("v2")]  # no temporary object left behind
    with duckdb.connect(str(tmp_path / "warehouse.duckdb"), read_only=True) as con:  # the view names the s3 glob
        (sql,) = con.execute("select sql from duckdb_views() where view_name = 'scores'").fetchone()
    assert f"s3://{root.removeprefix('s3://')}/calibration/scores/*.parquet" in sql
    _write(manager, "v2", _frame("v2", 3, 2), assets=(scores, scores_seen))  # downstream loads v2's s3 object
    views = ParquetViewsResource(database=str(tmp_path / "warehouse.duckdb"), root=root)  # the SQL models'
    with views.get_connection() as con:
        seen = con.execute("select * from calibration.scores_seen order by item").pl()
    assert seen.equals(_s3_view(tmp_path, root, "select * from calibration.scores where model_version = 'v2' "
                                "order by item"))


def test_two_threads_write_different_partitions_of_s3_at_once(tmp_path, root):
    rounds, n = 5, 3000

    def writer(key: str) -> None:
        for r in range(rounds):
            write_partition(root, "cleaning", "shared", key, _frame(key, n, r))

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(writer, ["a", "b"]))  # re-raises a writer's error
    assert refresh_views(tmp_path / "warehouse.duckdb", root) == ["cleaning.shared"]
    query = "select model_version, count(*), min(tag), max(tag) from cleaning.shared group by 1 order by 1"
    last = rounds - 1
    assert _s3_view(tmp_path, root, query).rows() == [("a", n, last, last), ("b", n, last, last)]


@pytest.mark.slow
def test_two_processes_write_different_partitions_of_s3_at_once(tmp_path, root):
    rounds, n = 4, 2000
    assert two_writer_processes(str(tmp_path / "warehouse.duckdb"), root, rounds, n) == {"a": "ok", "b": "ok"}
    query = "select model_version, count(*), min(tag), max(tag) from calibration.scores group by 1 order by 1"
    last = rounds - 1
    assert _s3_view(tmp_path, root, query).rows() == [("a", n, last, last), ("b", n, last, last)]


class _Broken(pl.DataFrame):
    """A frame whose Parquet writer fails after writing part of the file."""

    def write_parquet(self, file, *args, **kwargs):
        file.write(b"PAR1" + b"\0" * 100_000)
        raise OSError("disk went away mid-write")


def test_a_failed_writer_leaves_the_previous_version_and_no_object(root):
    write_partition(root, "cleaning", "flaky", "p", pl.DataFrame({"item": [1, 2, 3], "tag": [0, 0, 0]}))
    broken = _Broken({"item": [9], "tag": [1]})
    with pytest.raises(OSError, match="mid-write"):
        write_partition(root, "cleaning", "flaky", "p", broken)
    assert _read(root, "flaky", "p").rows() == [(1, 0), (2, 0), (3, 0)]
    fs = s3fs.S3FileSystem()
    fs.invalidate_cache()
    assert [p.rsplit("/", 1)[1] for p in fs.ls(f"{root}/cleaning/flaky")] == [partition_file("p")]


def test_a_killed_writer_leaves_the_previous_version_readable(root):
    n = 400_000
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", _KILL_WRITER, root, str(n)], stdout=subprocess.PIPE, text=True,
                            env=env)
    try:
        assert proc.stdout.readline().strip() == "1"  # one full write done; the next one is under way
        time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    frame = _read(root, "big", "p")
    assert frame.height == n and frame["tag"].n_unique() == 1 and frame["item"].to_list()[-1] == n - 1


def test_noisycal_query_reads_the_s3_views_of_its_snapshot(tmp_path, root):
    from resources.snapshot import query, refresh_snapshot

    (tmp_path / "settings.json").write_text(json.dumps({"warehouse": "parquet", "warehouse_root": root}))
    _write(ParquetWarehouseIOManager(database=str(tmp_path / "warehouse.duckdb"), root=root), "v1", _frame("v1", 3, 4))
    assert refresh_snapshot(tmp_path) is not None
    got = query(tmp_path, "select model_version, count(*), max(tag) from calibration.scores group by 1")
    assert got.rows() == [("v1", 3, 4)]
