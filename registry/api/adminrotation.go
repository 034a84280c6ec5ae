package api

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
)

// RotatedAdmin is the answer of credentials.rotateAdmin: the new admin credential, whose
// secret is only in the file Config names, and the admin credentials it replaced, now
// revoked.
type RotatedAdmin struct {
	Admin   Credential   `json:"admin"`
	Config  string       `json:"config"`
	Revoked []Credential `json:"revoked"`
}

// AdminConfigWriter writes the admin credential's CLI config on the registry's host
// (DATA_DIR/admin.conf): Path is the file, Write puts credential in it whole, mode 0600,
// with the registry's URL and CA.
type AdminConfigWriter struct {
	Path  string
	Write func(credential string) error
}

// RegisterAdminRotation adds the host-only credentials.rotateAdmin, which replaces the
// admin credential (the root tenant's credentials holding `*`) with a new one written
// through w. Only the host may: `*` is never granted over the network, not even by a
// credential holding it.
//
// The order keeps the host with a working admin credential whatever step fails or
// wherever the process dies: the new credential is made in one transaction (beside the
// old ones, which still work), then written to the file (a whole file, renamed into
// place), then the old ones are revoked in another transaction. A death before the file
// is written leaves the old file working and a new credential nobody holds; one before
// the revocation leaves the new file working and the old credentials too. Either way a
// second rotation revokes them all: it revokes every usable `*` credential that existed
// when it began, not only the one the file held.
func (s *Server) RegisterAdminRotation(w AdminConfigWriter) {
	var one sync.Mutex // one rotation at a time through this registry
	HandleHost(s, "credentials.rotateAdmin", func(_ context.Context, c *Caller, _ struct{}) (out RotatedAdmin, err error) {
		one.Lock()
		defer one.Unlock()
		var old []store.Credential
		var made store.Credential
		var bearer string
		err = c.update(func(tx *store.Tx) error {
			if old, err = tx.UsableHolding(store.RootTenant, ActionAll); err != nil {
				return err
			}
			made, bearer, err = tx.CreateCredential(store.RootTenant, []string{ActionAll}, time.Time{})
			return err
		})
		if err != nil {
			return out, err
		}
		if err := w.Write(bearer); err != nil {
			return out, s.unmakeAdmin(made.ID, w.Path, err)
		}
		err = c.update(func(tx *store.Tx) error {
			out = RotatedAdmin{Config: w.Path, Revoked: []Credential{}} // afresh when etcd runs it again
			cur, err := tx.Credential(made.ID)
			if err != nil {
				return err
			}
			if !cur.Usable(tx.Now()) {
				// Another registry on this store rotated at the same moment and revoked
				// this one: its file holds the admin credential now.
				return proto.Errorf(proto.Conflict, "another registry on this store rotated the admin credential at the same time and revoked the one written to %s: "+
					"use the admin.conf of the registry where that rotation ran, or run `credentials rotate-admin` again", w.Path).WithReason(proto.ReasonRotatedElsewhere)
			}
			out.Admin = credentialView(cur)
			for _, o := range old {
				revoked, err := tx.RevokeCredential(o.ID)
				if err != nil {
					return err
				}
				out.Revoked = append(out.Revoked, credentialView(revoked))
			}
			return nil
		})
		switch {
		case err != nil && proto.AsError(err).Details.Reason == proto.ReasonRotatedElsewhere:
			return RotatedAdmin{}, err
		case err != nil:
			return RotatedAdmin{}, notRevoked(made.ID, old, w.Path, err)
		}
		s.log.Info("admin credential rotated", "credential", made.ID, "revoked", len(out.Revoked), "config", w.Path)
		return out, nil
	})
}

// unmakeAdmin revokes the admin credential made for a rotation whose file could not be
// written: the file, written whole or not at all, still holds the credential it held.
func (s *Server) unmakeAdmin(id, path string, cause error) error {
	s.log.Error("writing the rotated admin credential", "config", path, "err", cause)
	err := s.store.Update(func(tx *store.Tx) error { _, err := tx.RevokeCredential(id); return err })
	if err != nil {
		s.log.Error("revoking the admin credential no file holds", "credential", id, "err", err)
	}
	return proto.Errorf(proto.Unavailable, "the registry could not write %s (%v); it holds the admin credential it held before, which still works, and nothing was revoked: "+
		"make the file writable by the registry's user (room on its disk, the data directory's permissions), then run `credentials rotate-admin` again", path, cause).WithReason(proto.ReasonConfigNotWritten)
}

// notRevoked says that the rotation wrote its new credential but could not revoke the
// old ones: the file works, and so do they until a rotation (or credentials revoke)
// ends them.
func notRevoked(made string, old []store.Credential, path string, cause error) error {
	ids := make([]string, len(old))
	for i, o := range old {
		ids[i] = o.ID
	}
	code := proto.CodeOf(cause)
	if code == proto.Internal {
		code = proto.Unavailable // the message must reach the host: INTERNAL's is replaced
	}
	return proto.Errorf(code, "%s now holds the new admin credential %s, which works; the old admin credential(s) %s could not be revoked (%v) and still work: "+
		"run `credentials rotate-admin` again once the store answers, or revoke them with `credentials revoke ID` and the new %s", path, made, strings.Join(ids, ", "), cause, path).WithReason(proto.ReasonOldNotRevoked)
}
