package image

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"testing"

	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/registry/store"
	"github.com/better-compute/better-compute/registry/store/storetest"
)

// catalogRows is the size of the catalog BenchmarkList pages through.
const catalogRows = 100_000

// BenchmarkList lists one page of 200 of acme's view of a catalog of 100,000 rows:
// 50,000 of acme's own, 30,000 public ones of the platform and 20,000 of beta's that
// acme does not see, interleaved by ref. Each iteration reads the next page.
func BenchmarkList(b *testing.B) {
	st := openCatalog(b)
	scopes := []struct {
		tenant string
		public bool
		n      int
	}{{"acme", false, 50_000}, {store.RootTenant, true, 30_000}, {"beta", false, 20_000}}
	for _, sc := range scopes {
		for start := 0; start < sc.n; start += 10_000 {
			storetest.Update(b, st, func(tx *store.Tx) error {
				for i := start; i < start+10_000; i++ {
					img := store.Image{Tenant: sc.tenant, Ref: fmt.Sprintf("image-%06d@1", i*7%catalogRows), Kind: proto.KindOS,
						Format: proto.FormatRaw, Compression: proto.CompressionZstd, SHA256: digestA, SizeBytes: 1 << 30,
						Source: "https://images.example.com/x.raw.zst", Public: sc.public}
					if sc.public {
						img.Verified, img.SignerID, img.SignerTenant, img.Signature = true, "platform", store.RootTenant, "c2lnbmF0dXJl"
					}
					if _, err := tx.CreateImage(img); err != nil {
						return err
					}
				}
				return nil
			})
		}
	}
	cursor, rows := "", 0
	for b.Loop() {
		err := st.View(func(tx *store.Tx) error {
			imgs, next, err := List(tx, "acme", "", store.Page{Cursor: cursor, Limit: store.MaxPage})
			rows += len(imgs)
			cursor = next
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkRegister registers Ed25519-signed images one transaction each: checking
// the fields, verifying the signature against the allowlist, writing the row and its
// indexes, and the fsync of the commit. Signing is outside the timer.
func BenchmarkRegister(b *testing.B) {
	st := openCatalog(b)
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	der, _ := x509.MarshalPKIXPublicKey(pub)
	storetest.Update(b, st, func(tx *store.Tx) error {
		_, err := AddSigner(tx, "acme", "acme-1", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
		return err
	})
	i := 0
	for b.Loop() {
		b.StopTimer()
		req := osRequest(fmt.Sprintf("bench-%d@1", i))
		i++
		img, _, _ := validate(req)
		req.SignerID, req.Signature = "acme-1", base64.StdEncoding.EncodeToString(ed25519.Sign(priv, SigningInput(img)))
		b.StartTimer()
		if _, err := register(st, "acme", req); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(i)/b.Elapsed().Seconds(), "registers/s")
}
