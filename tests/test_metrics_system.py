"""Per-worker system and network metrics: own-socket byte counts match the traffic actually sent,
counters survive sockets closing, the window aggregate has the documented units, and unusable
collectors fall back instead of breaking training."""

from __future__ import annotations

import logging
import socket
import struct
import time

import pytest
import torch

from dynamix.metrics import ebpf
from dynamix.metrics.gradstats import GradientWindowStats
from dynamix.metrics.system import NetCounters, SystemMonitor, TcpInfoCounters, parse_tcp_info, read_proc_net_dev
from dynamix.metrics.window import WindowAccumulator


def _pair():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    client = socket.create_connection(srv.getsockname())
    peer, _ = srv.accept()
    srv.close()
    return client, peer


def _send(a: socket.socket, b: socket.socket, n: int) -> None:
    a.sendall(b"x" * n)
    got = 0
    while got < n:
        got += len(b.recv(1 << 16))


def test_tcp_info_counts_exactly_the_bytes_this_process_sent_and_received():
    counters = TcpInfoCounters()
    start = counters.read()
    client, peer = _pair()
    try:
        _send(client, peer, 300_000)
        _send(peer, client, 50_000)
        time.sleep(0.05)  # let the last ACKs land
        end = counters.read()
    finally:
        client.close()
        peer.close()
    # Both ends live in this process: each byte is counted once sent and once received (a little
    # slack for other sockets the test process may own).
    assert 350_000 - 200 <= end.tx_bytes - start.tx_bytes <= 350_000 * 1.02
    assert 350_000 - 200 <= end.rx_bytes - start.rx_bytes <= 350_000 * 1.02
    assert client.fileno() == -1  # the collector worked on duplicates; closing ours was ours


def test_counts_survive_sockets_closing_between_samples():
    counters = TcpInfoCounters()
    client, peer = _pair()
    _send(client, peer, 10_000)
    mid = counters.read()
    client.close()
    peer.close()
    after = counters.read()
    assert after.tx_bytes >= mid.tx_bytes >= 10_000  # cumulative, never decreasing


def test_parse_tcp_info_offsets():
    raw = bytearray(232)
    struct.pack_into("I", raw, 100, 7)  # tcpi_total_retrans
    struct.pack_into("QQ", raw, 120, 111, 222)  # bytes_acked, bytes_received
    struct.pack_into("Q", raw, 200, 333)  # bytes_sent
    assert parse_tcp_info(bytes(raw)) == NetCounters(333.0, 222.0, 7.0)
    assert parse_tcp_info(bytes(raw[:136])) == NetCounters(111.0, 222.0, 7.0)  # old kernels: acked


def test_proc_fallback_reads_interfaces_and_snmp():
    c = read_proc_net_dev()
    assert c.tx_bytes >= 0 and c.rx_bytes >= 0 and c.retrans_segments >= 0
    mon = SystemMonitor("proc")
    assert mon.source == "proc" and mon.net().tx_bytes >= 0


def test_monitor_rates_cpu_ratio_and_memory():
    mon = SystemMonitor()
    a = mon.sample()
    time.sleep(0.2)  # idle: almost no CPU time
    b = mon.sample()
    t = time.perf_counter()
    while time.perf_counter() - t < 0.2:  # busy (on a shared machine the ratio is below 1)
        sum(range(1000))
    c = mon.sample()
    idle, busy = SystemMonitor.rates(a, b)["cpu_time_ratio"], SystemMonitor.rates(b, c)["cpu_time_ratio"]
    assert idle < 0.1 and busy > idle and busy <= 1.2
    assert 0 < mon.mem_util() < 1
    with pytest.raises(ValueError, match="metrics source"):
        SystemMonitor("nope")


def test_a_failing_collector_logs_once_and_reports_zero(caplog, monkeypatch):
    mon = SystemMonitor()

    def broken():
        raise OSError("no /proc here")

    monkeypatch.setattr(mon._tcp, "read", broken)
    with caplog.at_level(logging.WARNING):
        assert mon.net() == NetCounters(0.0, 0.0, 0.0)
        assert mon.net() == NetCounters(0.0, 0.0, 0.0)
    assert sum("tcp_info unavailable" in r.message for r in caplog.records) == 1


def test_window_accumulator_means_units_and_gradient_stats():
    acc = WindowAccumulator(rank=3, monitor=SystemMonitor())
    grads = [torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])]
    for g in grads:
        acc.grads.add(g)
        acc.add(iter_s=0.1, compute_s=0.06, comm_s=0.03, wait_s=0.01, loss=2.0, correct=8, n=32, local_grad=None)
    w = acc.close(batch_size=32, speed=0.5)
    assert (w.rank, w.batch_size, w.speed) == (3, 32, 0.5)
    assert w.iter_time_ms == pytest.approx(100) and w.compute_ms == pytest.approx(60)
    assert w.comm_ms == pytest.approx(30) and w.wait_ms == pytest.approx(10)
    assert w.throughput_samples_per_s == pytest.approx(320)
    assert w.loss == pytest.approx(2.0) and w.batch_acc == pytest.approx(0.25)
    ref = GradientWindowStats()
    for g in grads:
        ref.add(g)
    assert w.sigma2_norm == pytest.approx(ref.summary()["sigma2_norm"]) and w.sigma2_norm == pytest.approx(1.0)
    # The next window starts empty.
    acc.add(iter_s=0.2, compute_s=0.2, comm_s=0.0, wait_s=0.0, loss=1.0, correct=0, n=8, local_grad=None)
    w2 = acc.close(batch_size=8, system=False)
    assert w2.iter_time_ms == pytest.approx(200) and w2.grad_norm == 0.0 and w2.net_tx_bytes_per_s == 0.0


def test_ebpf_backend_parses_events_and_falls_back_with_one_line(caplog, monkeypatch):
    assert ebpf.parse_event("41234 29500\n") == (41234, 29500)
    assert ebpf.parse_event("Attaching 1 probe...") is None
    monkeypatch.setattr(ebpf.shutil, "which", lambda name: None)
    with caplog.at_level(logging.INFO):
        assert ebpf.BpftraceRetransmits.start() is None
    assert [r.message for r in caplog.records if "eBPF" in r.message] == [
        "metrics: eBPF retransmission backend off (bpftrace is not installed (Debian package bpftrace)); "
        "using TCP_INFO counters"]
    mon = SystemMonitor(ebpf=True)  # still measures
    assert mon.net().tx_bytes >= 0
