package profile

import (
	"errors"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto"
)

// metal returns a metal profile document with the given fields after the required ones.
func metal(fields string) string {
	if fields == "" {
		return `{"id": "t", "version": 1, "target": "metal"}`
	}
	return `{"id": "t", "version": 1, "target": "metal", ` + fields + `}`
}

// steps returns a metal profile with an image and the given main steps.
func steps(list string) string {
	return metal(`"image": {"ref": "os@1"}, "steps": [` + list + `]`)
}

// retiring returns a profile of a shipped retire profile's id, as a shipped document
// would be, with the given main and cleanup steps.
func retiring(main, cleanup string) string {
	doc := `{"id": "metal-retire", "version": 2, "target": "metal", "steps": [` + main + `]`
	if cleanup != "" {
		doc += `, "cleanup": [` + cleanup + `]`
	}
	return doc + "}"
}

func TestDefineRefuses(t *testing.T) {
	long := func(n int) string { return strings.Repeat("a", n) }
	tests := map[string]struct {
		doc, path string
	}{
		// The document.
		"not JSON":             {`{"id": "t",}`, "$"},
		"trailing garbage":     {metal("") + ` {}`, "$"},
		"comment":              {`{"id": "t", /* c */ "version": 1}`, "$"},
		"NaN":                  {`{"id": "t", "version": NaN, "target": "metal"}`, "version"},
		"invalid UTF-8":        {metal(`"description": "caf` + "\xe9" + `"`), "description"},
		"duplicate key":        {`{"id": "t", "version": 1, "id": "u", "target": "metal"}`, "id"},
		"too deep":             {metal(`"drivers": {"boot": {"driver": "ipxe", "config": ` + strings.Repeat(`{"a": `, 31) + `1` + strings.Repeat("}", 31) + `}}`), "drivers.boot.config.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a"},
		"too large":            {metal(`"description": "` + long(proto.MaxProfileDocument) + `"`), "$"},
		"not an object":        {`[]`, "$"},
		"unknown field":        {metal(`"name": "x"`), "name"},
		"missing id":           {`{"version": 1, "target": "metal"}`, "id"},
		"missing version":      {`{"id": "t", "target": "metal"}`, "version"},
		"missing target":       {`{"id": "t", "version": 1}`, "target"},
		"id upper case":        {`{"id": "Ubuntu", "version": 1, "target": "metal"}`, "id"},
		"id slash":             {`{"id": "a/b", "version": 1, "target": "metal"}`, "id"},
		"id empty":             {`{"id": "", "version": 1, "target": "metal"}`, "id"},
		"id too long":          {`{"id": "` + long(129) + `", "version": 1, "target": "metal"}`, "id"},
		"id not a string":      {`{"id": 7, "version": 1, "target": "metal"}`, "id"},
		"version fraction":     {`{"id": "t", "version": 1.5, "target": "metal"}`, "version"},
		"version zero":         {`{"id": "t", "version": 0, "target": "metal"}`, "version"},
		"version negative":     {`{"id": "t", "version": -1, "target": "metal"}`, "version"},
		"version string":       {`{"id": "t", "version": "1", "target": "metal"}`, "version"},
		"version huge":         {`{"id": "t", "version": 1e400, "target": "metal"}`, "version"},
		"version too big":      {`{"id": "t", "version": 2147483648, "target": "metal"}`, "version"},
		"target":               {`{"id": "t", "version": 1, "target": "bare"}`, "target"},
		"description long":     {metal(`"description": "` + long(maxDescription+1) + `"`), "description"},
		"description control":  {metal(`"description": "a\u0007b"`), "description"},
		"description number":   {metal(`"description": 1`), "description"},
		"role":                 {metal(`"role": "admin"`), "role"},
		"entry":                {metal(`"entry": "import"`), "entry"},
		"adopt with image":     {metal(`"entry": "adopt", "image": {"ref": "os@1"}`), "image"},
		"adopt with userData":  {metal(`"userData": {"kind": "cloud-init", "template": "bcd-host.yaml.hbs"}, "entry": "adopt"`), "userData"},
		"adopt with steps":     {metal(`"entry": "adopt", "steps": []`), "steps"},
		"vps role":             {`{"id": "t", "version": 1, "target": "vps", "image": {"ref": "os@1"}, "role": "host"}`, "role"},
		"vps entry":            {`{"id": "t", "version": 1, "target": "vps", "image": {"ref": "os@1"}, "entry": "deploy"}`, "entry"},
		"vps drivers":          {`{"id": "t", "version": 1, "target": "vps", "image": {"ref": "os@1"}, "drivers": {}}`, "drivers"},
		"vps hostConfig":       {`{"id": "t", "version": 1, "target": "vps", "image": {"ref": "os@1"}, "hostConfig": {}}`, "hostConfig"},
		"vps steps":            {`{"steps": [], "id": "t", "version": 1, "target": "vps", "image": {"ref": "os@1"}}`, "steps"},
		"vps acceptance":       {`{"id": "t", "version": 1, "target": "vps", "image": {"ref": "os@1"}, "acceptance": []}`, "acceptance"},
		"vps cleanup":          {`{"id": "t", "version": 1, "target": "vps", "image": {"ref": "os@1"}, "cleanup": []}`, "cleanup"},
		"vps without image":    {`{"id": "t", "version": 1, "target": "vps"}`, "image"},
		"driver concern":       {metal(`"drivers": {"bmc": "redfish"}`), "drivers.bmc"},
		"driver name":          {metal(`"drivers": {"power": "Redfish"}`), "drivers.power"},
		"driver type":          {metal(`"drivers": {"power": 1}`), "drivers.power"},
		"driver missing":       {metal(`"drivers": {"boot": {"config": {}}}`), "drivers.boot.driver"},
		"driver config":        {metal(`"drivers": {"boot": {"driver": "ipxe", "config": "x"}}`), "drivers.boot.config"},
		"driver unknown field": {metal(`"drivers": {"boot": {"driver": "ipxe", "cfg": {}}}`), "drivers.boot.cfg"},
		"a credential file":    {metal(`"drivers": {"power": {"driver": "redfish", "config": {"credentialRef": "/etc/shadow"}}}`), "drivers.power.config.credentialRef"},
		"a credential URL":     {metal(`"drivers": {"power": {"driver": "redfish", "config": {"credentialRef": "file:///etc/shadow"}}}`), "drivers.power.config.credentialRef"},
		"a credential value":   {metal(`"drivers": {"power": {"driver": "redfish", "config": {"credentialRef": 7}}}`), "drivers.power.config.credentialRef"},
		"drivers not object":   {metal(`"drivers": ["redfish"]`), "drivers"},
		"image not object":     {metal(`"image": "os@1"`), "image"},
		"image ref missing":    {metal(`"image": {"format": "raw"}`), "image.ref"},
		"image ref no version": {metal(`"image": {"ref": "ubuntu"}`), "image.ref"},
		"image ref name":       {metal(`"image": {"ref": "Ubuntu@1"}`), "image.ref"},
		"image ref version":    {metal(`"image": {"ref": "ubuntu@1 2"}`), "image.ref"},
		"image ref two @":      {metal(`"image": {"ref": "ubuntu@1@2"}`), "image.ref"},
		"image ref a version the catalog cannot register": {metal(`"image": {"ref": "os@2026.09+Build1"}`), "image.ref"},
		"image ref upper-case version":                    {metal(`"image": {"ref": "os@2026.09-RC1"}`), "image.ref"},
		"image ref owner":                                 {metal(`"image": {"ref": "Acme/os@1"}`), "image.ref"},
		"image ref two owners":                            {metal(`"image": {"ref": "acme/b/os@1"}`), "image.ref"},
		"deploy image owner":                              {steps(`{"use": "deploy.deploy", "with": {"image": "/os@1"}}`), "steps[0].with.image"},
		"image format":                                    {metal(`"image": {"ref": "os@1", "format": "vmdk"}`), "image.format"},
		"image compression":                               {metal(`"image": {"ref": "os@1", "compression": "xz"}`), "image.compression"},
		"image unknown field":                             {metal(`"image": {"ref": "os@1", "size": 1}`), "image.size"},
		"image iso deployed":                              {metal(`"image": {"ref": "os@1", "format": "iso"}, "steps": [{"use": "deploy.deploy"}]`), "image.format"},
		"userData kind":                                   {metal(`"userData": {"kind": "kickstart", "template": "ks.cfg"}`), "userData.kind"},
		"userData template":                               {metal(`"userData": {"kind": "cloud-init"}`), "userData.template"},
		"userData charset":                                {metal(`"userData": {"kind": "talos", "template": "../talos.yaml"}`), "userData.template"},
		"userData wrong kind":                             {metal(`"userData": {"kind": "cloud-init", "template": "bcd-host.ign"}`), "userData.template"},
		"userData talos ign":                              {metal(`"userData": {"kind": "talos", "template": "bcd-host.yaml.hbs"}`), "userData.template"},
		"hostConfig type":                                 {metal(`"hostConfig": []`), "hostConfig"},
		"hostConfig unit":                                 {metal(`"hostConfig": {"gpu-overclock": {}}`), "hostConfig.gpu-overclock"},
		"hostConfig branch":                               {metal(`"hostConfig": {"nvidia-driver": {"branch": "58"}}`), "hostConfig.nvidia-driver.branch"},
		"hostConfig sysctl":                               {metal(`"hostConfig": {"sysctl": {"kernel.modprobe": "/tmp/x"}}`), "hostConfig.sysctl.kernel.modprobe"},
		"hostConfig options":                              {metal(`"hostConfig": {"kernel-modules": {"options": {"nvidia": "x"}}}`), "hostConfig.kernel-modules.options.nvidia"},
		"hostConfig when":                                 {metal(`"hostConfig": {"fabric-manager": {"when": "nvswitch &"}}`), "hostConfig.fabric-manager.when"},
		"hostConfig setting":                              {metal(`"hostConfig": {"iommu": {"passthru": true}}`), "hostConfig.iommu.passthru"},
		// Steps.
		"steps not array":         {metal(`"steps": {}`), "steps"},
		"too many steps":          {metal(`"steps": [` + strings.TrimSuffix(strings.Repeat(`{"use": "power.getPower"},`, maxSteps+1), ",") + `]`), "steps"},
		"too many acceptance":     {metal(`"acceptance": [` + strings.TrimSuffix(strings.Repeat(`{"use": "power.getPower"},`, maxPhaseSteps+1), ",") + `]`), "acceptance"},
		"too many cleanup":        {metal(`"cleanup": [` + strings.TrimSuffix(strings.Repeat(`{"use": "power.getPower"},`, maxPhaseSteps+1), ",") + `]`), "cleanup"},
		"step not object":         {steps(`"power.getPower"`), "steps[0]"},
		"use missing":             {steps(`{"on": "site"}`), "steps[0].use"},
		"use unknown":             {steps(`{"use": "power.get"}`), "steps[0].use"},
		"use not a string":        {steps(`{"use": 1}`), "steps[0].use"},
		"step unknown field":      {steps(`{"use": "power.getPower", "name": "x"}`), "steps[0].name"},
		"on unknown":              {steps(`{"use": "power.getPower", "on": "bmc"}`), "steps[0].on"},
		"on site step elsewhere":  {steps(`{"use": "power.getPower", "on": "ramdisk"}`), "steps[0].on"},
		"on ramdisk step on site": {steps(`{"use": "inventory.refresh", "on": "site"}`), "steps[0].on"},
		"on node for ramdisk":     {steps(`{"use": "disk.wipe", "on": "node"}`), "steps[0].on"},
		"on control-plane relay":  {steps(`{"use": "boot.cleanUp", "on": "control-plane"}`), "steps[0].on"},
		"on site control-plane":   {steps(`{"use": "metal.ensureRamdisk", "on": "site"}`), "steps[0].on"},
		"with not object":         {steps(`{"use": "power.setPower", "with": "off"}`), "steps[0].with"},
		"with unknown input":      {steps(`{"use": "power.setPower", "with": {"action": "off", "force": true}}`), "steps[0].with.force"},
		"with on no-input step":   {steps(`{"use": "power.getPower", "with": {"x": 1}}`), "steps[0].with.x"},
		"action":                  {steps(`{"use": "power.setPower", "with": {"action": "reboot"}}`), "steps[0].with.action"},
		"action missing":          {steps(`{"use": "power.setPower"}`), "steps[0].with.action"},
		"action missing in with":  {steps(`{"use": "power.setPower", "with": {}}`), "steps[0].with.action"},
		"device":                  {steps(`{"use": "management.setBootDevice", "with": {"device": "usb"}}`), "steps[0].with.device"},
		"device missing":          {steps(`{"use": "management.setBootDevice", "with": {"persistent": true}}`), "steps[0].with.device"},
		"persistent":              {steps(`{"use": "management.setBootDevice", "with": {"device": "disk", "persistent": "yes"}}`), "steps[0].with.persistent"},
		"dcgm level high":         {steps(`{"use": "diag.dcgm", "with": {"level": 5}}`), "steps[0].with.level"},
		"dcgm level zero":         {steps(`{"use": "diag.dcgm", "with": {"level": 0}}`), "steps[0].with.level"},
		"wipe mode":               {steps(`{"use": "disk.wipe", "with": {"mode": "shred"}}`), "steps[0].with.mode"},
		"agent role":              {steps(`{"use": "wait.agentJoined", "with": {"role": "bmc"}}`), "steps[0].with.role"},
		"role missing":            {steps(`{"use": "wait.agentJoined"}`), "steps[0].with.role"},
		"media none":              {steps(`{"use": "media.insert", "with": {}}`), "steps[0].with"},
		"media no with":           {steps(`{"use": "media.insert"}`), "steps[0].with"},
		"media two":               {steps(`{"use": "media.insert", "with": {"url": "https://x/a.iso", "image": "os@1"}}`), "steps[0].with.image"},
		"media url http":          {steps(`{"use": "media.insert", "with": {"url": "http://x/a.iso"}}`), "steps[0].with.url"},
		"media url user":          {steps(`{"use": "media.insert", "with": {"url": "https://u:p@x/a.iso"}}`), "steps[0].with.url"},
		"media image ref":         {steps(`{"use": "media.insert", "with": {"image": "rescue.iso"}}`), "steps[0].with.image"},
		"fromStep syntax":         {steps(`{"use": "power.getPower"}, {"use": "media.insert", "with": {"fromStep": "0"}}`), "steps[1].with.fromStep"},
		"fromStep missing":        {steps(`{"use": "power.getPower"}, {"use": "media.insert", "with": {"fromStep": "steps[5]"}}`), "steps[1].with.fromStep"},
		"fromStep itself":         {steps(`{"use": "media.insert", "with": {"fromStep": "steps[0]"}}`), "steps[0].with.fromStep"},
		"fromStep later":          {steps(`{"use": "media.insert", "with": {"fromStep": "steps[1]"}}, {"use": "power.getPower"}`), "steps[0].with.fromStep"},
		"fromStep later phase":    {metal(`"steps": [{"use": "media.insert", "with": {"fromStep": "cleanup[0]"}}], "cleanup": [{"use": "power.getPower"}]`), "steps[0].with.fromStep"},
		"fromStep in fallback":    {steps(`{"use": "power.getPower", "fallback": {"use": "media.insert", "with": {"fromStep": "steps[0]"}}}`), "steps[0].fallback.with.fromStep"},
		"deploy image ref":        {steps(`{"use": "deploy.deploy", "with": {"image": "os"}}`), "steps[0].with.image"},
		"deploy without image":    {metal(`"steps": [{"use": "deploy.deploy"}]`), "steps[0].with.image"},
		"timeout no unit":         {steps(`{"use": "power.getPower", "timeout": "30"}`), "steps[0].timeout"},
		"timeout zero":            {steps(`{"use": "power.getPower", "timeout": "0s"}`), "steps[0].timeout"},
		"timeout too long":        {steps(`{"use": "power.getPower", "timeout": "25h"}`), "steps[0].timeout"},
		"timeout trailing number": {steps(`{"use": "power.getPower", "timeout": "1m30"}`), "steps[0].timeout"},
		"timeout fraction":        {steps(`{"use": "power.getPower", "timeout": "1.5h"}`), "steps[0].timeout"},
		"timeout negative":        {steps(`{"use": "power.getPower", "timeout": "-5m"}`), "steps[0].timeout"},
		"timeout unit order":      {steps(`{"use": "power.getPower", "timeout": "30m1h"}`), "steps[0].timeout"},
		"timeout days":            {steps(`{"use": "power.getPower", "timeout": "1d"}`), "steps[0].timeout"},
		"timeout number":          {steps(`{"use": "power.getPower", "timeout": 30}`), "steps[0].timeout"},
		"retries high":            {steps(`{"use": "power.getPower", "retries": 11}`), "steps[0].retries"},
		"retries negative":        {steps(`{"use": "power.getPower", "retries": -1}`), "steps[0].retries"},
		"retries fraction":        {steps(`{"use": "power.getPower", "retries": 1.5}`), "steps[0].retries"},
		"retries string":          {steps(`{"use": "power.getPower", "retries": "2"}`), "steps[0].retries"},
		"await value":             {steps(`{"use": "boot.kexec", "await": "boot"}`), "steps[0].await"},
		"await on deploy":         {steps(`{"use": "deploy.deploy", "await": "rejoin"}`), "steps[0].await"},
		"await on power off":      {steps(`{"use": "power.setPower", "await": "rejoin", "with": {"action": "off"}}`), "steps[0].await"},
		"onFailure":               {steps(`{"use": "power.getPower", "onFailure": "ignore"}`), "steps[0].onFailure"},
		"fallback not object":     {steps(`{"use": "power.getPower", "fallback": "power.getPower"}`), "steps[0].fallback"},
		"fallback nested":         {steps(`{"use": "power.getPower", "fallback": {"use": "power.getPower", "fallback": {"use": "power.getPower"}}}`), "steps[0].fallback.fallback"},
		"fallback use":            {steps(`{"use": "power.getPower", "fallback": {"use": "power.reset"}}`), "steps[0].fallback.use"},
		// metal.revokeIdentity is the retire profiles' last step: a tenant's deploy that
		// ran it would leave its own node only retirable.
		"revoke in a tenant's profile": {steps(`{"use": "power.getPower"}, {"use": "metal.revokeIdentity"}`), "steps[1].use"},
		"revoke not last":              {retiring(`{"use": "metal.revokeIdentity"}, {"use": "power.getPower"}`, ""), "steps[0].use"},
		"revoke as a fallback":         {retiring(`{"use": "power.getPower", "fallback": {"use": "metal.revokeIdentity"}}`, ""), "steps[0].fallback.use"},
		"revoke in cleanup":            {retiring(`{"use": "power.getPower"}`, `{"use": "metal.revokeIdentity"}`), "cleanup[0].use"},
		"fallback input":               {steps(`{"use": "power.getPower", "fallback": {"use": "power.setPower", "with": {"action": "warm"}}}`), "steps[0].fallback.with.action"},
		"fallback timeout":             {steps(`{"use": "power.getPower", "fallback": {"use": "power.getPower", "timeout": "soon"}}`), "steps[0].fallback.timeout"},
		"when syntax":                  {steps(`{"use": "power.getPower", "when": "a &"}`), "steps[0].when"},
		"when empty":                   {steps(`{"use": "power.getPower", "when": ""}`), "steps[0].when"},
		"when not a string":            {steps(`{"use": "power.getPower", "when": true}`), "steps[0].when"},
		"when canonically long":        {steps(`{"use": "power.getPower", "when": "` + strings.Repeat("a,", 300) + `a"}`), "steps[0].when"},
		"acceptance step":              {metal(`"acceptance": [{"use": "diag.dcgm", "with": {"level": 9}}]`), "acceptance[0].with.level"},
		"cleanup step":                 {metal(`"cleanup": [{"use": "boot.cleanUp", "on": "node"}]`), "cleanup[0].on"},
		// User data and deploy.
		"deploy before render":     {metal(`"image": {"ref": "os@1"}, "userData": {"kind": "cloud-init", "template": "bcd-host.yaml.hbs"}, "steps": [{"use": "deploy.deploy"}, {"use": "userdata.render"}]`), "steps[0]"},
		"deploy without render":    {metal(`"steps": [{"use": "deploy.deploy"}], "image": {"ref": "os@1"}, "userData": {"kind": "ignition", "template": "bcd-host.ign"}`), "steps[0]"},
		"render under when":        {metal(`"image": {"ref": "os@1"}, "userData": {"kind": "cloud-init", "template": "bcd-host.yaml.hbs"}, "steps": [{"use": "userdata.render", "when": "x"}, {"use": "deploy.deploy"}]`), "steps[1]"},
		"render may fail":          {metal(`"image": {"ref": "os@1"}, "userData": {"kind": "cloud-init", "template": "bcd-host.yaml.hbs"}, "steps": [{"use": "userdata.render", "onFailure": "continue"}, {"use": "deploy.deploy"}]`), "steps[1]"},
		"render only as fallback":  {metal(`"image": {"ref": "os@1"}, "userData": {"kind": "cloud-init", "template": "bcd-host.yaml.hbs"}, "steps": [{"use": "power.getPower", "fallback": {"use": "userdata.render"}}, {"use": "deploy.deploy"}]`), "steps[1]"},
		"deploy in fallback first": {metal(`"image": {"ref": "os@1"}, "userData": {"kind": "cloud-init", "template": "bcd-host.yaml.hbs"}, "steps": [{"use": "power.getPower", "fallback": {"use": "deploy.deploy"}}, {"use": "userdata.render"}]`), "steps[0].fallback"},
		"render without userData":  {steps(`{"use": "userdata.render"}`), "steps[0].use"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p, err := Define([]byte(tc.doc))
			if err == nil {
				t.Fatalf("Define accepted it: %s", p.Document())
			}
			var e *proto.Error
			if !errors.As(err, &e) {
				t.Fatalf("error %T is not a *proto.Error: %v", err, err)
			}
			if e.Code != proto.InvalidConfig || e.Details.Path != tc.path {
				t.Errorf("got %s at %q (%s), want INVALID_CONFIG at %q", e.Code, e.Details.Path, e.Message, tc.path)
			}
			if e.Message == "" {
				t.Error("empty message")
			}
		})
	}
}

func TestDefineAccepts(t *testing.T) {
	tests := map[string]string{
		"minimal metal":           metal(""),
		"vps":                     `{"id": "vm", "version": 3, "target": "vps", "description": "line one\nline two", "image": {"ref": "ubuntu-24.04@2026.09", "format": "qcow2"}, "userData": {"kind": "cloud-init", "template": "bcd-host.yaml.hbs"}}`,
		"adopt":                   metal(`"entry": "adopt", "role": "dedicated", "hostConfig": {"nvidia-driver": {"branch": "580"}}, "acceptance": [{"use": "diag.dcgm", "on": "node"}]`),
		"talos custom":            metal(`"image": {"ref": "talos@1.11.0"}, "userData": {"kind": "talos", "template": "talos-worker.yaml"}, "steps": [{"use": "userdata.render"}, {"use": "deploy.deploy"}]`),
		"drivers":                 metal(`"drivers": {"power": "redfish", "boot": {"driver": "ipxe", "config": {"chain": "https://boot.example.com"}}, "virtual-media": {"driver": "redfish"}}`),
		"fromStep earlier":        steps(`{"use": "power.getPower"}, {"use": "media.insert", "with": {"fromStep": "steps[0]"}}`),
		"fromStep cleanup":        metal(`"steps": [{"use": "power.getPower"}], "cleanup": [{"use": "media.insert", "with": {"fromStep": "steps[0]"}}]`),
		"revoke last, shipped id": retiring(`{"use": "power.getPower", "onFailure": "continue"}, {"use": "metal.revokeIdentity"}`, `{"use": "boot.cleanUp"}`),
		"media url":               steps(`{"use": "media.insert", "with": {"url": "https://images.example.com/rescue.iso?sig=a&b=c"}}`),
		"another's image":         metal(`"image": {"ref": "acme/os@1"}, "steps": [{"use": "deploy.deploy", "with": {"image": "root/os@2"}}]`),
		"deploy own image":        metal(`"image": {"ref": "rescue@1", "format": "iso"}, "steps": [{"use": "deploy.deploy", "with": {"image": "os@1"}}]`),
		"every step field":        steps(`{"use": "diag.dcgm", "on": "node", "with": {"level": 4}, "timeout": "1h30m", "retries": 10, "onFailure": "continue", "when": "gpu.vendor=nvidia", "fallback": {"use": "diag.dcgm", "with": {"level": 1}, "timeout": "90m"}}`),
		"await set power":         steps(`{"use": "power.setPower", "with": {"action": "graceful-restart"}, "await": "rejoin"}`),
		"longest timeout":         steps(`{"use": "disk.wipe", "timeout": "24h"}`),
		"render in earlier":       metal(`"image": {"ref": "os@1"}, "userData": {"kind": "cloud-init", "template": "bcd-host.yaml.hbs"}, "steps": [{"use": "userdata.render", "retries": 2}, {"use": "deploy.deploy", "fallback": {"use": "deploy.deploy"}}]`),
		"white space":             "\n\t{ \"id\" : \"t\" ,\r\n \"version\" : 1 , \"target\" : \"metal\" }\n",
		"id dots":                 `{"id": "..", "version": 1, "target": "metal"}`,
		"largest version":         `{"id": "t", "version": 2147483647, "target": "metal"}`,
		"escaped field names":     `{"\u0069d": "t", "version": 1, "target": "metal"}`,
	}
	for name, doc := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := Define([]byte(doc)); err != nil {
				t.Fatal(err)
			}
		})
	}
}
