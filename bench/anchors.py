"""The anchors' configs that bench/run and bench/scale both run HAProxy with: one text, so both
measure the same HAProxy."""


def haproxy_config(workers, mode, bind, servers, maxconn, name="bench"):
    """HAProxy with `workers` threads balancing `servers` (ports on 127.0.0.1) round robin in
    `mode`, at most `maxconn` connections; `bind` is the rest of its bind line (address, and TLS
    options for the TLS cases)."""
    http = mode == "http"
    return f"""global
  nbthread {workers}
  maxconn {maxconn}
defaults
  mode {mode}
  {"http-reuse always" if http else ""}
  {"option http-keep-alive" if http else ""}
  timeout http-keep-alive 10m
  timeout http-request 10m
  timeout connect 2s
  timeout client 10m
  timeout server 10m
listen {name}
  bind {bind}
  balance roundrobin
""" + "".join(f"  server s{i} 127.0.0.1:{p}\n" for i, p in enumerate(servers))
