#!/usr/bin/env python3
"""What a lost packet costs one request/response exchange over the kernel links.

Run as root with the netns topology up (deploy/netns/netns.sh up CONF). A
server runs in one region's namespace and a client in another's; the client
opens one TCP connection, then repeats: send REQUEST bytes, wait for the
server's RESPONSE bytes, sleep GAP ms (an idle connection between rounds, as
in training). It prints the exchange time's mean, median, p90 and max, and
the mean over the fastest half (the loss-free cost). Run it once over a lossy
link and once over a clean one: the difference of the means is what losses
add, the figure the planner's recovery term (docs/planner.md) must predict.

    python3 bench/loss_cost.py --server-ns gd-us --server-ip 10.77.1.2 \\
        --client-ns gd-asia --request 16400 --response 32800 --rounds 200

Output: one JSON object on stdout.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time


def recv_exact(sock, n):
    got = 0
    while got < n:
        b = sock.recv(min(1 << 20, n - got))
        if not b:
            raise ConnectionError("peer closed after %d of %d bytes" % (got, n))
        got += len(b)


def set_cc(sock, cc):
    if cc:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())


def serve(port, request, response, rounds, cc):
    lst = socket.socket()
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.bind(("0.0.0.0", port))
    lst.listen(1)
    lst.settimeout(30)
    conn, _ = lst.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    set_cc(conn, cc)
    conn.settimeout(30)
    payload = b"r" * response
    for _ in range(rounds):
        recv_exact(conn, request)
        conn.sendall(payload)
    conn.close()


def client(ip, port, request, response, rounds, gap_ms, cc):
    deadline = time.monotonic() + 30
    while True:
        try:
            sock = socket.socket()
            set_cc(sock, cc)
            sock.settimeout(5)
            sock.connect((ip, port))
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.settimeout(30)
    payload = b"q" * request
    times = []
    for _ in range(rounds):
        t0 = time.monotonic()
        sock.sendall(payload)
        recv_exact(sock, response)
        times.append((time.monotonic() - t0) * 1e3)
        time.sleep(gap_ms / 1e3)
    sock.close()
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server-ns", required=True)
    ap.add_argument("--server-ip", required=True)
    ap.add_argument("--client-ns", required=True)
    ap.add_argument("--port", type=int, default=47001)
    ap.add_argument("--request", type=int, default=16400, help="bytes client -> server per exchange")
    ap.add_argument("--response", type=int, default=32800, help="bytes server -> client per exchange")
    ap.add_argument("--rounds", type=int, default=200, help="exchanges (at most 5000)")
    ap.add_argument("--gap-ms", type=float, default=150, help="idle time between exchanges")
    ap.add_argument("--cc", default="", help="congestion control for both ends (default: the system's)")
    ap.add_argument("--role", choices=["server", "client", "both"], default="both", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if not 1 <= a.rounds <= 5000:
        sys.exit("--rounds must be in [1, 5000]")
    if a.role == "server":
        serve(a.port, a.request, a.response, a.rounds, a.cc)
        return
    if a.role == "client":
        print(json.dumps(client(a.server_ip, a.port, a.request, a.response, a.rounds, a.gap_ms, a.cc)))
        return
    common = ["--server-ns", a.server_ns, "--server-ip", a.server_ip, "--client-ns", a.client_ns, "--port",
              str(a.port), "--request", str(a.request), "--response", str(a.response), "--rounds", str(a.rounds),
              "--gap-ms", str(a.gap_ms), "--cc", a.cc]
    me = os.path.abspath(__file__)
    srv = subprocess.Popen(["ip", "netns", "exec", a.server_ns, sys.executable, me, "--role", "server"] + common)
    try:
        limit = 60 + a.rounds * (a.gap_ms / 1e3 + 5)
        out = subprocess.run(["ip", "netns", "exec", a.client_ns, sys.executable, me, "--role", "client"] + common,
                             capture_output=True, text=True, timeout=limit, check=True).stdout
    finally:
        srv.wait(timeout=60)
    times = sorted(json.loads(out))
    half = times[: max(1, len(times) // 2)]
    print(json.dumps({
        "server_ns": a.server_ns, "client_ns": a.client_ns, "request": a.request, "response": a.response,
        "rounds": a.rounds, "gap_ms": a.gap_ms, "cc": a.cc or "system",
        "mean_ms": statistics.fmean(times), "median_ms": statistics.median(times),
        "p90_ms": times[int(0.9 * (len(times) - 1))], "max_ms": times[-1],
        "fast_half_mean_ms": statistics.fmean(half),
        "slow_share": sum(t > 1.5 * statistics.median(times) for t in times) / len(times),
    }))


if __name__ == "__main__":
    main()
