package metal

import (
	"regexp"
	"slices"
	"strings"
	"unicode"

	"github.com/better-compute/better-compute/jsondoc"
	"github.com/better-compute/better-compute/proto"
	"github.com/better-compute/better-compute/proto/hostunit"
	"github.com/better-compute/better-compute/registry/secret"
	"github.com/better-compute/better-compute/registry/store"
)

// Enrollment is a machine to enroll in a pool.
type Enrollment struct {
	Tenant string
	Pool   string
	// MACs are its boot interfaces; ProductUUID its SMBIOS product UUID. One of them
	// is needed.
	MACs        []string
	ProductUUID string
	BMC         store.BMC
	// HardwareProfile is the node's own hardware profile; "" takes the pool's.
	HardwareProfile string
	Labels          map[string]string
	// Drivers are per-node bindings that win over the BMC's and the hardware profile's.
	Drivers map[string]Binding
	// Platform says that a root-tenant credential enrolls the machine: it may bind the
	// platform's credential (secret://platform/NAME), a socket of the site host and a
	// file of the site host in its driver overrides (proto.SiteHostFile).
	Platform bool
}

// MaxLabels bounds a node's labels. They travel in its installed OS's NodeSpec, one
// agent frame (proto.MaxFrame, 4 MiB), where JSON writes a value's line separators
// (U+2028, U+2029) in six bytes each, twice what a request spends on them: without a
// bound, an enrollment of 2 MiB made a NodeSpec no frame carries, pushed and failed at
// every session of the node's agent. At the bound, each label of the longest name and
// value, the labels take under 200 KiB of it.
const MaxLabels = 256

var (
	productUUID = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	labelName   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,252}$`)
)

// Enroll stores a new node in state enrolling, with its driver bindings resolved from
// its BMC, its hardware profile (its own, else the pool's) and its overrides, and creates
// its metal-enroll workflow (followed by the requests the pool's policy.enrollment
// chains): Start it once tx has committed. MACs are stored lower-case and
// colon-separated, the UUID lower-case.
func (s *Service) Enroll(tx *store.Tx, e Enrollment) (store.Node, store.Run, error) {
	n, err := s.enroll(tx, e)
	if err != nil {
		return n, store.Run{}, err
	}
	run, n, err := s.begin(tx, n, Enroll, Options{}, chainAfter(tx, n, Enroll))
	return n, run, err
}

func (s *Service) enroll(tx *store.Tx, e Enrollment) (store.Node, error) {
	n := store.Node{Tenant: e.Tenant, Pool: e.Pool, HardwareProfile: e.HardwareProfile, Labels: e.Labels}
	if len(e.MACs) > store.MaxNodeMACs {
		return n, proto.Errorf(proto.InvalidInput, "%d MACs: a machine is enrolled with at most %d, its boot interfaces", len(e.MACs), store.MaxNodeMACs).
			WithPath("macs").WithReason(proto.ReasonTooLarge)
	}
	for i, m := range e.MACs {
		mac, err := parseMAC(m, string(jsondoc.Path("macs").Index(i)))
		if err != nil {
			return n, err
		}
		n.MACs = append(n.MACs, mac)
	}
	if e.ProductUUID != "" {
		n.ProductUUID = strings.ToLower(e.ProductUUID)
		if !productUUID.MatchString(n.ProductUUID) {
			return n, proto.Errorf(proto.InvalidInput, "product UUID %q: write 8-4-4-4-12 hex digits", e.ProductUUID).WithPath("productUuid")
		}
	}
	if len(e.Labels) > MaxLabels {
		return n, proto.Errorf(proto.InvalidInput, "%d labels: a node has at most %d", len(e.Labels), MaxLabels).WithPath("labels")
	}
	for k, v := range e.Labels {
		if !labelName.MatchString(k) {
			return n, proto.Errorf(proto.InvalidInput, "label name %q: letters, digits, '.', '_', '-' and '/', starting with a letter or digit", k).WithPath("labels")
		}
		if len(v) > 253 || strings.ContainsFunc(v, unicode.IsControl) {
			return n, proto.Errorf(proto.InvalidInput, "label %s: a value is one line of at most 253 bytes", k).WithPath("labels." + k)
		}
	}
	if err := checkBindings(e.Drivers, "drivers", e.Platform); err != nil {
		return n, err
	}
	pool, err := tx.Pool(e.Tenant, e.Pool)
	if err != nil {
		return n, proto.AsError(err).WithPath("pool")
	}
	if n.BMC, err = bindBMC(tx, pool, e.BMC, e.Platform); err != nil {
		return n, err
	}
	n.PlatformBMC, n.PlatformOverrides = e.Platform, e.Platform
	hw, err := s.hardwareProfile(pool, e.HardwareProfile)
	if err != nil {
		return n, err
	}
	n.DriverOverrides = map[string]store.DriverBinding{}
	for c, b := range e.Drivers {
		n.DriverOverrides[c] = store.DriverBinding(b)
	}
	n.Drivers = resolveDriverBindings(n.BMC, hw, e.Drivers)
	if n, err = tx.CreateNode(n); err != nil {
		return n, err
	}
	return n, stateEvent(tx, "", n, nil)
}

// checkBMC checks a BMC: a driver bcd site has (proto.BMCDrivers), an address, and a credential that is a
// secret:// reference, never the secret itself nor a file; the platform's
// (secret://platform/NAME) only when platform.
func checkBMC(b store.BMC, platform bool) (store.BMC, error) {
	if !slices.Contains(proto.BMCDrivers, b.Driver) {
		return b, proto.Errorf(proto.InvalidInput, "BMC driver %q does not exist: use one of %s", b.Driver, strings.Join(proto.BMCDrivers, ", ")).WithPath("bmc.driver")
	}
	if b.Address == "" || len(b.Address) > 1024 || strings.ContainsFunc(b.Address, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
		return b, proto.Errorf(proto.InvalidInput, "BMC address %q: a URL or host:port without spaces", b.Address).WithPath("bmc.address")
	}
	if b.CredentialRef != "" {
		if err := checkCredentialRef(b.CredentialRef, "bmc.credentialRef"); err != nil {
			return b, err
		}
		if _, ok := secret.PlatformRef(b.CredentialRef); ok && !platform {
			return b, proto.Errorf(proto.Forbidden, "%s is the platform's credential: only the platform's operator binds it to a machine; put your own with `better-compute secrets put` and name it", b.CredentialRef).
				WithPath("bmc.credentialRef").WithReason(proto.ReasonPlatformCredential)
		}
	}
	return b, nil
}

// checkCredentialRef refuses a credential reference that is not a secret:// reference
// of the registry's secret store (a file path, a file:// URL, the secret itself) as
// INVALID_INPUT at path, without echoing it.
func checkCredentialRef(ref, path string) error {
	if !hostunit.IsSecretRef(ref) {
		return proto.Errorf(proto.InvalidInput, "BMC credential: give a secret:// reference to a secret of the registry (`better-compute secrets put`), never the secret itself nor a file: it %s", hostunit.SecretRefRule).WithPath(path)
	}
	return nil
}
