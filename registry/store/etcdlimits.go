package store

import (
	"errors"
	"fmt"
	"strings"

	"github.com/better-compute/better-compute/proto"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	gproto "google.golang.org/protobuf/proto"
)

const (
	// etcdDefaultRequestBytes is etcd's default --max-request-bytes (1.5 MiB), the
	// figure an operator is told to raise the flag to.
	etcdDefaultRequestBytes = 1536 << 10
	// etcdHeaderRoom is what etcd adds to a request before it measures it against
	// --max-request-bytes (the raft request's header: its id, the auth revision and a
	// user name, and the request's framing): a few dozen bytes without a user name.
	etcdHeaderRoom = 1 << 10
	// etcdProbeBytes is the size of the request the store checks a cluster takes at
	// start: the largest it sends, the end of a deploy (runsize.go: the run's record and
	// the node's host section take at most etcdProbeBytes-endRoom, the rest of the
	// transaction endRoom), which a cluster of the defaults takes with etcd's header.
	// The largest of the other requests is one record of about 1 MiB in a transaction
	// of its own: a hello's inventory section (at most proto.MaxInventoryRecord) or a
	// profile version (its document, at most proto.MaxProfileDocument, written as it
	// is, and its other fields, under 400 bytes), with its key, compares, an index
	// entry, generation and commit keys, under 8 KiB; no request holds two (a deploy
	// marks its version used with an entry of its own and its run refers to the
	// version, a delete marks each version it hides likewise, a NodeSpec takes the host
	// section it shares with the node's record from the record, and store copy sends a
	// record over half a MiB alone). TestEtcdProbeCoversTheLargestSection,
	// TestEtcdProbeCoversTheLargestProfile and TestTheEndOfARunAtItsBoundFits store them
	// on a cluster that takes no more than this.
	etcdProbeBytes = etcdDefaultRequestBytes - etcdHeaderRoom
	// etcdProbeName is the scratch key the probes name, P/~probe/<replica's id>: a
	// bucket's name never starts with ~. Nothing is ever written to it.
	etcdProbeName = "~probe/"
)

// probeLimits checks that the cluster takes the largest requests the store sends: one of
// etcdProbeBytes (--max-request-bytes: a cluster that takes it takes every write the
// store makes) and one of etcdMaxTxnOps compares and operations
// (--max-txn-ops). Each is a transaction whose compare never holds, so etcd checks it
// whole and commits it, and it writes nothing: a refused cluster is left as it was, and
// replicas starting at once do not conflict. A refusal is INVALID_CONFIG naming the
// member flag to raise; any other error is returned as it came.
func (b *etcdBackend) probeLimits() error {
	key := []byte(b.prefix + etcdProbeName + string(b.id))
	never := &pb.Compare{Key: key, Target: pb.Compare_MOD, Result: pb.Compare_LESS, TargetUnion: &pb.Compare_ModRevision{ModRevision: 0}}

	large := &pb.TxnRequest{Compare: []*pb.Compare{never}, Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: key}}}}}
	put := large.Success[0].GetRequestPut()
	for gproto.Size(large) < etcdProbeBytes {
		put.Value = make([]byte, len(put.Value)+etcdProbeBytes-gproto.Size(large))
	}
	many := &pb.TxnRequest{}
	for range etcdMaxTxnOps {
		many.Compare = append(many.Compare, never)
		many.Success = append(many.Success, &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: key, CountOnly: true}}})
	}

	kv := clientv3.RetryKVClient(b.cli)
	var refused []string
	for _, req := range []*pb.TxnRequest{large, many} {
		ctx, cancel := b.rpc()
		_, err := kv.Txn(ctx, req)
		cancel()
		switch err = rpctypes.Error(err); {
		case err == nil:
		case errors.Is(err, rpctypes.ErrRequestTooLarge) || status.Code(err) == codes.ResourceExhausted:
			refused = append(refused, fmt.Sprintf("run every member with --max-request-bytes %d at least (etcd's default): the store sends requests of up to %d bytes, and the cluster refused one (%v)", etcdDefaultRequestBytes, etcdProbeBytes, err))
		case errors.Is(err, rpctypes.ErrTooManyOps):
			refused = append(refused, fmt.Sprintf("run every member with --max-txn-ops %d at least (etcd's default): the store's transactions hold up to %d compares and operations at one level, and the cluster refused them (%v)", etcdMaxTxnOps, etcdMaxTxnOps, err))
		default:
			return err
		}
	}
	if len(refused) > 0 {
		return proto.Errorf(proto.InvalidConfig, "the etcd cluster cannot take what the registry writes, and nothing was written: %s", strings.Join(refused, "; ")).WithPath("--etcd-endpoints")
	}
	return nil
}
