package agentplane

import (
	"context"
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/agents"
	"github.com/quic-go/quic-go"
)

// TestEndpointConnectionIDsAreLong reads off the wire the connection id the agent endpoint
// chooses for a new connection (the source connection id of the first packet it sends):
// at least 8 bytes. With quic-go's default of 4, a return of 10,000 agents now and then
// issued a new connection an id a live one held, and that agent's packets went to the
// live connection (agents.ConnectionIDLength): in the benchmark, an agent that thought
// itself back 15 s before the registry heard it.
func TestEndpointConnectionIDsAreLong(t *testing.T) {
	e := newEnv(t, agents.Config{})
	endpoint, err := net.ResolveUDPAddr("udp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	// A relay between a dialler and the endpoint that keeps the endpoint's first datagram.
	relay, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	up, err := net.DialUDP("udp", nil, endpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	go func() {
		buf := make([]byte, 2048)
		for {
			n, _, err := relay.ReadFromUDP(buf)
			if err != nil {
				return
			}
			up.Write(buf[:n])
		}
	}()
	first := make(chan []byte, 1)
	go func() {
		buf := make([]byte, 2048)
		n, err := up.Read(buf)
		if err == nil {
			first <- buf[:n]
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go quic.DialAddr(ctx, relay.LocalAddr().String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{proto.AgentALPN}}, nil)
	var p []byte
	select {
	case p = <-first:
	case <-ctx.Done():
		t.Fatal("the endpoint sent nothing to a dialler within 5 s")
	}
	// A long header: flags, version (4 bytes), destination id length and id, source id
	// length and id.
	if len(p) < 7 || p[0]&0x80 == 0 || len(p) < 7+int(p[5]) {
		t.Fatalf("the endpoint's first packet has no long header: % x", p[:min(len(p), 16)])
	}
	if scid := int(p[6+int(p[5])]); scid < 8 {
		t.Errorf("the endpoint chose a connection id of %d bytes, want 8 or more: ids that short collide among a fleet's connections", scid)
	}
}
