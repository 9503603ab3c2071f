// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
//
// Fulcrum's sockmap fast path (src/proxy/sockmap.rs loads it; scripts/bpf compiles it into
// sockmap.o beside this file, which is committed and embedded): every skb that arrives on a TCP
// socket in `socks` is handed to the egress of that socket's peer inside the kernel, so the bytes
// of an established connection never wake the process.
//
// Every map is keyed by the socket cookie (SO_COOKIE), the one identity of a socket that both the
// process and this program can read.
//
// Ordering: a socket's bytes are redirected only while nothing it passed to the process is still
// waiting there. Bytes arrive before both sockets are in `socks` and linked; those are passed to
// the socket's own receive queue (SK_PASS), the process reads them, writes them to the peer and
// then raises `taken`. Only when `taken` equals `passed` does the program redirect again, so a
// redirected byte never overtakes one the process is still moving.

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

// Upper bound of sockets in the fast path at once: two per connection. Entries cost only while
// used (hash maps allocate per element).
#define MAX_SOCKETS 262144

// Written by the process only: the peer's cookie, and the bytes of `passed` it has forwarded.
struct link {
	__u64 peer;
	__u64 taken;
};

// Written by this program only: bytes received on the socket (the stats' bytes in or out), and
// how many of them were passed to the process instead of redirected.
struct count {
	__u64 bytes;
	__u64 passed;
};

struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, MAX_SOCKETS);
	__type(key, __u64);
	__type(value, __u32);
} socks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_SOCKETS);
	__type(key, __u64);
	__type(value, struct link);
} links SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_SOCKETS);
	__type(key, __u64);
	__type(value, struct count);
} counts SEC(".maps");

SEC("sk_skb/stream_verdict")
int verdict(struct __sk_buff *skb)
{
	// A FIN without data reaches the verdict as an empty skb. TCP has already taken the FIN
	// (the process reads end of stream from the socket's state), so the skb carries nothing:
	// drop it. Redirected, the peer's send of zero bytes counts as a broken pipe; passed while
	// the psock's queue holds bytes for the peer, its zero-byte delivery does the same and
	// stops the socket's sending (the kernel's sk_psock_backlog takes 0 as a hard error).
	if (skb->len == 0)
		return SK_DROP;
	__u64 cookie = bpf_get_socket_cookie(skb);
	struct count *count = bpf_map_lookup_elem(&counts, &cookie);
	if (!count)
		return SK_PASS; // not a socket of ours: let it be read as usual
	__sync_fetch_and_add(&count->bytes, skb->len);
	struct link *link = bpf_map_lookup_elem(&links, &cookie);
	if (!link || link->taken != count->passed) {
		// Peer not linked yet, or earlier bytes still with the process: keep the order.
		__sync_fetch_and_add(&count->passed, skb->len);
		return SK_PASS;
	}
	__u64 peer = link->peer;
	// Flags 0: to the peer's egress, i.e. sent on the peer connection.
	return bpf_sk_redirect_hash(skb, &socks, &peer, 0);
}

char LICENSE[] SEC("license") = "GPL";
