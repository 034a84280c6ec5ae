package proto

import (
	"encoding/json"
	"maps"
	"slices"
)

// AgentALPN is the ALPN protocol of the agent plane's QUIC connections. A change of the
// wire format that old peers cannot read gets a new one.
const AgentALPN = "bc-agent/1"

// MessageType names the one body a Message carries.
type MessageType string

// The message types. Hello, ack, inventory, secretRequest, renewRequest and ping go from
// agent to registry on the session stream, spec, secret (the answer to a secretRequest),
// renewal (the answer to a renewRequest) and shutdown from registry to agent on it; command goes from registry to agent on a command stream, and
// progress (any number, while it runs) and then result come back on the same stream.
const (
	MsgHello         MessageType = "hello"
	MsgSpec          MessageType = "spec"
	MsgAck           MessageType = "ack"
	MsgInventory     MessageType = "inventory"
	MsgCommand       MessageType = "command"
	MsgResult        MessageType = "result"
	MsgProgress      MessageType = "progress"
	MsgSecretRequest MessageType = "secretRequest"
	MsgSecret        MessageType = "secret"
	MsgRenewRequest  MessageType = "renewRequest"
	MsgRenewal       MessageType = "renewal"
	// MsgShutdown tells an agent that said it reads one (Hello.ReadsShutdown) that the
	// registry is stopping, and when to come back: its reason is the phrase of the
	// CloseShutdown that follows it (ShutdownReason).
	MsgShutdown MessageType = "shutdown"
	// MsgPing carries no body: the agent's keep-alive, which the registry ignores.
	MsgPing MessageType = "ping"
)

// Message is one frame's content: a type and exactly the body of that type. Unknown
// fields are ignored, so a newer peer may add fields; a message of an unknown type is an
// error for the peer that receives it.
type Message struct {
	Type          MessageType    `json:"type"`
	Hello         *Hello         `json:"hello,omitempty"`
	Spec          *NodeSpec      `json:"spec,omitempty"`
	Ack           *Ack           `json:"ack,omitempty"`
	Inventory     *Inventory     `json:"inventory,omitempty"`
	Command       *Command       `json:"command,omitempty"`
	Result        *Result        `json:"result,omitempty"`
	Progress      *Progress      `json:"progress,omitempty"`
	SecretRequest *SecretRequest `json:"secretRequest,omitempty"`
	Secret        *Secret        `json:"secret,omitempty"`
	RenewRequest  *RenewRequest  `json:"renewRequest,omitempty"`
	Renewal       *Renewal       `json:"renewal,omitempty"`
	Shutdown      *Shutdown      `json:"shutdown,omitempty"`
}

// Hello opens a session: what the agent has applied and what it has to report.
type Hello struct {
	// ObservedGeneration is the NodeSpec generation the agent last applied (0: none).
	ObservedGeneration int64 `json:"observedGeneration"`
	// Inventory holds the agent's inventory sections by name (images, system, nics, ...).
	Inventory map[string]json.RawMessage `json:"inventory,omitempty"`
	// BootID is the boot id of the machine the agent runs on (CheckBootID): a session of
	// a boot the registry saw before is a reconnect, not the machine's return from a
	// power action or a kexec. Empty from an agent of an earlier version or a site agent.
	BootID string `json:"bootId,omitempty"`
	// RefusedAttempts is how many of the agent's connection attempts the registry refused
	// at admission (QUIC's CONNECTION_REFUSED to the first packet: too many handshakes
	// in flight) since it last sent a hello: one an attempt, however many copies of its
	// first packet were refused. The registry plans its next return on them
	// (registry/agents). An agent of this version always sends it, 0 included; absent
	// (nil) from one of an earlier version, whose attempts the registry cannot count.
	// Never negative.
	RefusedAttempts *int64 `json:"refusedAttempts,omitempty"`
	// ReadsShutdown says that the agent reads a shutdown message on its session stream
	// (MsgShutdown): a stopping registry sends it one before its CloseShutdown. An agent
	// of an earlier version takes a message it does not know for a broken protocol and
	// ends its session with CloseProtocol, so it is sent none.
	ReadsShutdown bool `json:"readsShutdown,omitempty"`
}

// MaxHelloSections bounds the inventory sections one hello carries. An agent reports
// those of its role, seven at most (a machine's installed OS: its hardware and `host`);
// the rest is room for the sections of later versions, which a registry that does not
// know them leaves out (CheckInventorySection) while it records the rest of the hello.
const MaxHelloSections = 64

// Ack reports the outcome of applying a NodeSpec generation: applied when Error is nil.
type Ack struct {
	Generation int64  `json:"generation"`
	Error      *Error `json:"error,omitempty"`
}

// Inventory replaces one inventory section of the agent.
type Inventory struct {
	Section string          `json:"section"`
	Data    json.RawMessage `json:"data"`
}

// inventorySections are the inventory sections the agents of each role report: a
// machine's agents its hardware (the installed OS's also its host convergence), a site
// agent its own description, cache, boot entries and discoveries.
var inventorySections = map[Role][]string{
	RoleRamdisk: {SectionSystem, SectionNICs, SectionDisks, SectionCPU, SectionMemory, SectionGPUs},
	RoleNode:    {SectionSystem, SectionNICs, SectionDisks, SectionCPU, SectionMemory, SectionGPUs, SectionHost},
	RoleSite:    {SectionSite, SectionImages, SectionBootEntries, SectionDiscoveries},
}

// CheckInventorySection refuses, INVALID_INPUT at path, a section no agent of role
// reports: the registry keeps only these, so an agent (or whoever holds its key) cannot
// make it keep sections without number.
func CheckInventorySection(role Role, section, path string) error {
	if slices.Contains(inventorySections[role], section) {
		return nil
	}
	return Errorf(InvalidInput, "a %s agent reports no inventory section %s: it reports %v", role, Quote(section), inventorySections[role]).WithPath(path)
}

// Command is a step relayed to an agent. The agent runs it at most once per ID.
type Command struct {
	ID      string          `json:"id"`
	Kind    string          `json:"kind"`
	Payload json.RawMessage `json:"payload,omitempty"`
	// Tenant is the tenant whose machine a site agent's command acts on: the registry
	// gives each tenant of a site at most TenantCommandShare of the site agent's
	// MaxAgentCommands at once. Empty for a machine's own agent's command.
	Tenant string `json:"tenant,omitempty"`
	// TimeoutSeconds is the timeout of the step a site agent's command is for: the agent
	// runs the command at most this long (a site, at most MaxSiteCommandSeconds), so that
	// one whose BMC never answers, or never reaches the state asked for, ends as TIMEOUT
	// and gives back its command stream. 0 is none. Like Tenant it is in the envelope,
	// which an agent of an earlier version decodes leniently, not in the payload.
	TimeoutSeconds int64 `json:"timeoutSeconds,omitempty"`
}

// MaxAgentCommands is how many command streams an agent lets the registry have open at
// once (its QUIC MaxIncomingStreams): a site agent's are shared by every tenant whose
// machines are at its site.
const MaxAgentCommands = 16

// TenantCommandShare is how many of a site agent's MaxAgentCommands one tenant's
// commands hold at once: half, so that a tenant whose BMCs never answer leaves the other
// half to the site's other tenants. The registry holds a tenant's further commands until
// one of its own ends.
const TenantCommandShare = MaxAgentCommands / 2

// Result answers a command: its result, or the error it failed with.
type Result struct {
	ID     string          `json:"id"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *Error          `json:"error,omitempty"`
}

// Bounded is r, an agent's answer to a command of kind, as the registry takes it: a
// result over MaxStepResult is refused (INVALID_INPUT, reason too-large, at result),
// which fails the step's attempt, and an error's text is cut (Error.Cut to
// MaxErrorMessage). The registry bounds each answer as it arrives, before anything of it
// is stored (the answer's record and the step's run each keep it); the agent bounds its
// own before sending it, since an answer past MaxFrame could not be sent at all: its
// command stayed pending until its step timed out, and ran again on the agent's next
// run, a second wipe or power cycle of the same step.
func (r Result) Bounded(kind string) Result {
	if len(r.Result) > MaxStepResult {
		return Result{ID: r.ID, Error: Errorf(InvalidInput, "the agent's %s result takes %d bytes, more than the %d a step's result may: have the step answer less (a workflow run keeps its steps' results)",
			kind, len(r.Result), MaxStepResult).WithPath("result").WithReason(ReasonTooLarge)}
	}
	r.Error = r.Error.Cut(MaxErrorMessage)
	return r
}

// MaxStepResult bounds the result of an agent's answer to a relayed command, as the
// registry takes it: a larger one fails the step's attempt (INVALID_INPUT, reason
// too-large, at result), since a workflow run keeps its steps' results in a record of
// its own, which a few of these fill (docs/workflows.md#what-a-run-keeps).
const MaxStepResult = 128 << 10

// MaxProgressDetail bounds the detail of a progress report the registry records; a
// larger one is not recorded.
const MaxProgressDetail = 4 << 10

// Progress reports how far a running command is (for example the bytes deploy.image
// has written); the registry records the latest on the workflow step that sent it.
type Progress struct {
	ID     string          `json:"id"`
	Detail json.RawMessage `json:"detail"`
}

// SecretRequest asks the registry for a secret a unit of the agent's NodeSpec names (a
// k8s-join's tokenRef). The registry answers with a Secret of the same ID on the session
// stream; the agent picks the ID, unique among its requests in flight.
type SecretRequest struct {
	ID  string `json:"id"`
	Ref string `json:"ref"`
}

// Secret answers a SecretRequest: the secret's value, or why the agent does not get it.
type Secret struct {
	ID    string `json:"id"`
	Value []byte `json:"value,omitempty"`
	Error *Error `json:"error,omitempty"`
}

// RenewRequest asks the registry for a new certificate of the agent's node and role for
// a new key pair the agent made, before its certificate expires. The registry answers
// with a Renewal of the same ID on the session stream.
type RenewRequest struct {
	ID string `json:"id"`
	// PublicKey is the new key's public half, PKIX DER.
	PublicKey []byte `json:"publicKey"`
}

// ProbeID is the id of the secret answer the registry sends to take fresh RTT samples
// at its end of an idle session whose estimate is stale (docs/agent-plane.md#keep-alive):
// it answers no request, and the agent drops it as it drops the answer to a request it
// gave up, which every agent that knows secret answers does (the sessions of agents
// older than those end on it, as on any message they do not know). What matters is only
// that it is a packet the agent acknowledges. An agent never picks it as the id of a
// request of its own (they are call-1, call-2, ...).
const ProbeID = "rtt-probe"

// Shutdown tells an agent that the registry is stopping. Its Reason is the phrase of
// the CloseShutdown the registry closes the connection with after it (ShutdownReason),
// read the same way: the message comes on the session stream, which QUIC sends again
// until the agent acknowledges it, where the close is one packet that may be lost.
type Shutdown struct {
	Reason string `json:"reason"`
}

// Renewal answers a RenewRequest: the new certificate (DER) from the agent CA, or why
// the agent does not get one.
type Renewal struct {
	ID          string `json:"id"`
	Certificate []byte `json:"certificate,omitempty"`
	Error       *Error `json:"error,omitempty"`
}

// DecodeMessage decodes one frame's payload and checks that it carries exactly the body
// its type names. A malformed message is INVALID_INPUT.
func DecodeMessage(b []byte) (Message, error) {
	var m Message
	if err := json.Unmarshal(b, &m); err != nil {
		return Message{}, Errorf(InvalidInput, "agent message: %v", err)
	}
	return m, m.check()
}

// check refuses a message whose bodies do not match its type.
func (m *Message) check() error {
	var bodies []MessageType
	for _, b := range []struct {
		t       MessageType
		present bool
	}{
		{MsgHello, m.Hello != nil}, {MsgSpec, m.Spec != nil}, {MsgAck, m.Ack != nil},
		{MsgInventory, m.Inventory != nil}, {MsgCommand, m.Command != nil}, {MsgResult, m.Result != nil},
		{MsgProgress, m.Progress != nil}, {MsgSecretRequest, m.SecretRequest != nil}, {MsgSecret, m.Secret != nil},
		{MsgRenewRequest, m.RenewRequest != nil}, {MsgRenewal, m.Renewal != nil}, {MsgShutdown, m.Shutdown != nil},
	} {
		if b.present {
			bodies = append(bodies, b.t)
		}
	}
	switch m.Type {
	case MsgPing:
		if len(bodies) != 0 {
			return Errorf(InvalidInput, "a ping carries the bodies %q: send none", bodies).WithPath(string(bodies[0]))
		}
		return nil
	case MsgHello, MsgSpec, MsgAck, MsgInventory, MsgCommand, MsgResult, MsgProgress, MsgSecretRequest, MsgSecret, MsgRenewRequest, MsgRenewal, MsgShutdown:
	default:
		return Errorf(InvalidInput, "agent message of unknown type %q", m.Type).WithPath("type")
	}
	if len(bodies) != 1 || bodies[0] != m.Type {
		return Errorf(InvalidInput, "agent message of type %q carries the bodies %q: send exactly the body of its type", m.Type, bodies).WithPath(string(m.Type))
	}
	switch m.Type {
	case MsgHello:
		if err := m.Hello.checkInventory(); err != nil {
			return err
		}
		if err := CheckBootID(m.Hello.BootID); err != nil {
			return AsError(err).WithPath("hello.bootId")
		}
		if n := m.Hello.RefusedAttempts; n != nil && *n < 0 {
			return Errorf(InvalidInput, "hello of %d refused attempts: count the attempts refused since the last hello, 0 or more", *n).WithPath("hello.refusedAttempts")
		}
	case MsgSpec:
		// The agent's ack names the generation it answers, and 0 is none applied.
		if m.Spec.Generation < 1 {
			return Errorf(InvalidInput, "spec of generation %d: generations count from 1", m.Spec.Generation).WithPath("spec.generation")
		}
	case MsgInventory:
		if err := CheckSectionName(m.Inventory.Section); err != nil {
			return AsError(err).WithPath("inventory.section")
		}
	case MsgCommand:
		if err := CheckCommandID(m.Command.ID); err != nil {
			return AsError(err).WithPath("command.id")
		}
	case MsgResult:
		if err := CheckCommandID(m.Result.ID); err != nil {
			return AsError(err).WithPath("result.id")
		}
	case MsgProgress:
		if err := CheckCommandID(m.Progress.ID); err != nil {
			return AsError(err).WithPath("progress.id")
		}
	case MsgSecretRequest:
		if err := CheckCommandID(m.SecretRequest.ID); err != nil {
			return AsError(err).WithPath("secretRequest.id")
		}
		if m.SecretRequest.Ref == "" {
			return Errorf(InvalidInput, "secretRequest without a ref").WithPath("secretRequest.ref")
		}
	case MsgSecret:
		if err := CheckCommandID(m.Secret.ID); err != nil {
			return AsError(err).WithPath("secret.id")
		}
		if (len(m.Secret.Value) > 0) == (m.Secret.Error != nil) {
			return Errorf(InvalidInput, "a secret answer carries either a value or an error").WithPath("secret")
		}
	case MsgRenewRequest:
		if err := CheckCommandID(m.RenewRequest.ID); err != nil {
			return AsError(err).WithPath("renewRequest.id")
		}
		if len(m.RenewRequest.PublicKey) == 0 {
			return Errorf(InvalidInput, "renewRequest without a public key").WithPath("renewRequest.publicKey")
		}
	case MsgRenewal:
		if err := CheckCommandID(m.Renewal.ID); err != nil {
			return AsError(err).WithPath("renewal.id")
		}
		if (len(m.Renewal.Certificate) > 0) == (m.Renewal.Error != nil) {
			return Errorf(InvalidInput, "a renewal carries either a certificate or an error").WithPath("renewal")
		}
	case MsgShutdown:
		if _, ok := ShutdownDelay(m.Shutdown.Reason); !ok {
			return Errorf(InvalidInput, "a shutdown names no moment to come back: its reason is %s", Quote(m.Shutdown.Reason)).WithPath("shutdown.reason")
		}
	}
	return nil
}

// checkInventory refuses, INVALID_INPUT at hello.inventory, a hello of more than
// MaxHelloSections sections or of a section named otherwise than CheckSectionName
// takes (the first such name in order): no agent sends one, and the registry would read
// each of its sections against the store.
func (h *Hello) checkInventory() error {
	if n := len(h.Inventory); n > MaxHelloSections {
		return Errorf(InvalidInput, "hello of %d inventory sections: an agent reports those of its role, at most %d", n, MaxHelloSections).WithPath("hello.inventory")
	}
	for _, name := range slices.Sorted(maps.Keys(h.Inventory)) {
		if err := CheckSectionName(name); err != nil {
			return AsError(err).WithPath("hello.inventory")
		}
	}
	return nil
}
