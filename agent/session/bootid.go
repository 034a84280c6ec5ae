package session

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/better-compute/better-compute/proto"
)

// bootIDFile is where Linux tells the boot id, a UUID new at every boot (a kexec too).
const bootIDFile = "proc/sys/kernel/random/boot_id"

// ReadBootID returns the boot id of the machine whose / is root, from
// /proc/sys/kernel/random/boot_id under it, for Config.BootID. When it cannot (no procfs
// there, or what it holds is no boot id) it logs why and returns "": the registry then
// takes each session of the agent for a new boot of the machine, as it did of agents that
// sent none.
func ReadBootID(root string, log *slog.Logger) string {
	b, err := os.ReadFile(filepath.Join(root, bootIDFile))
	if err == nil {
		id := strings.TrimSpace(string(b))
		if err = proto.CheckBootID(id); err == nil {
			return id
		}
	}
	log.Warn("the agent sends no boot id: the registry takes each of its sessions for a new boot of the machine, a reconnect included", "err", err)
	return ""
}
