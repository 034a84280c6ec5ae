package firstboot

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/ramdisk/gpt"
	"github.com/better-compute/better-compute/ramdisk/gpt/gpttest"
	"github.com/better-compute/better-compute/ramdisk/mount"
	ignitionconfig "github.com/coreos/ignition/v2/config"
	"github.com/google/go-cmp/cmp"
)

var files = Files{UserData: []byte("#cloud-config\nhostname: n1\n"), Kind: KindCloudInit, InstanceID: "node-1",
	Config: []byte("version = 1\n"), JoinEncryptionKey: []byte(`{"kty":"OKP"}`)}

// listing is every file under dir with its mode and content.
func listing(t *testing.T, dir string) map[string]string {
	t.Helper()
	got := map[string]string{}
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || p == dir || info.Name() == "lost+found" {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if info.IsDir() {
			got[rel+"/"] = info.Mode().Perm().String()
			return nil
		}
		b, _ := os.ReadFile(p)
		got[rel] = info.Mode().Perm().String() + " " + string(b)
		return nil
	})
	return got
}

var cloudInitTree = map[string]string{
	"var/":                                 "-rwxr-xr-x",
	"var/lib/":                             "-rwxr-xr-x",
	"var/lib/cloud/":                       "-rwxr-xr-x",
	"var/lib/cloud/seed/":                  "-rwxr-xr-x",
	"var/lib/cloud/seed/nocloud/":          "-rwx------",
	"var/lib/cloud/seed/nocloud/user-data": "-rw------- #cloud-config\nhostname: n1\n",
	"var/lib/cloud/seed/nocloud/meta-data": "-rw------- instance-id: node-1\n",
	"etc/":                                 "-rwxr-xr-x",
	"etc/bcd/":                             "-rwx------",
	"etc/bcd/config.toml":                  "-rw-r--r-- version = 1\n",
	"etc/bcd/join-encryption.jwk":          `-rw-r--r-- {"kty":"OKP"}`,
}

func TestCloudInit(t *testing.T) {
	root := t.TempDir()
	if err := CloudInit(root, files); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(cloudInitTree, listing(t, root)); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
}

func TestIgnitionConfig(t *testing.T) {
	cases := map[string]struct {
		doc     string
		want    string
		wantErr error
	}{
		"files added": {
			doc: `{"ignition":{"version":"3.4.0"},"systemd":{"units":[{"name":"bcd.service","enabled":true}]}}`,
			want: `{"ignition":{"version":"3.4.0"},"systemd":{"units":[{"name":"bcd.service","enabled":true}]},"storage":{"files":[` +
				`{"path":"/etc/bcd/config.toml","mode":420,"overwrite":true,"contents":{"source":"data:;base64,dmVyc2lvbiA9IDEK"}},` +
				`{"path":"/etc/bcd/join-encryption.jwk","mode":420,"overwrite":true,"contents":{"source":"data:;base64,eyJrdHkiOiJPS1AifQ=="}}]}}`,
		},
		"same path replaced, others kept": {
			doc: `{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/etc/bcd/join-token","mode":384},{"path":"/etc/bcd/config.toml"}]}}`,
			want: `{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/etc/bcd/join-token","mode":384},` +
				`{"path":"/etc/bcd/config.toml","mode":420,"overwrite":true,"contents":{"source":"data:;base64,dmVyc2lvbiA9IDEK"}},` +
				`{"path":"/etc/bcd/join-encryption.jwk","mode":420,"overwrite":true,"contents":{"source":"data:;base64,eyJrdHkiOiJPS1AifQ=="}}]}}`,
		},
		"spec 2 refused": {doc: `{"ignition":{"version":"2.3.0"}}`, wantErr: ErrUnsupported},
		"not json":       {doc: `ignition: {}`, wantErr: errors.New("any")},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := IgnitionConfig([]byte(tc.doc), files)
			if tc.wantErr != nil {
				if err == nil || (errors.Is(tc.wantErr, ErrUnsupported) && !errors.Is(err, ErrUnsupported)) {
					t.Fatalf("IgnitionConfig: %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var g, w any
			json.Unmarshal(got, &g)
			json.Unmarshal([]byte(tc.want), &w)
			if diff := cmp.Diff(w, g); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}

// TestIgnitionConfigKeepsNumbersExact: the operator's values come back as they were
// written, a number above 2^53 (a partition's sizeMiB, which Ignition takes as any
// integer, and a key unknown to bcd) included, not rounded through a float64.
func TestIgnitionConfigKeepsNumbersExact(t *testing.T) {
	disks := `[{"device":"/dev/sda","partitions":[{"label":"data","sizeMiB":9007199254740993,"x-note":1.50}]}]`
	motd := `{"path":"/etc/motd","x-serial":123456789012345678901234567890}`
	doc := `{"ignition":{"version":"3.4.0"},"storage":{"disks":` + disks + `,"files":[` + motd + `]}}`
	got, err := IgnitionConfig([]byte(doc), files)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"disks":` + disks, `"files":[` + motd + `,`} {
		if !bytes.Contains(got, []byte(want)) {
			t.Errorf("got %s\nwant it to hold %s as it was", got, want)
		}
	}
}

// TestIgnitionConfigAddsToTheStorageIgnitionReads: Ignition decodes its config with
// encoding/json, which reads "Storage" as storage and "Files" as files; bcd's files are
// added to the members it reads, and Ignition's own parser finds the template's files
// beside bcd's. Before, the ramdisk added a storage member beside "Storage", which
// Ignition read after it: the template's files were lost. Two members Ignition reads as
// one field are refused.
func TestIgnitionConfigAddsToTheStorageIgnitionReads(t *testing.T) {
	motd := `{"Path":"/etc/motd","contents":{"source":"data:,hello"}}`
	for name, doc := range map[string]string{
		"Storage":          `{"ignition":{"version":"3.4.0"},"Storage":{"files":[` + motd + `]}}`,
		"Storage.Files":    `{"ignition":{"version":"3.4.0"},"Storage":{"Files":[` + motd + `]}}`,
		"IGNITION.VERSION": `{"IGNITION":{"VERSION":"3.4.0"},"storage":{"FILES":[` + motd + `]}}`,
	} {
		t.Run(name, func(t *testing.T) {
			got, err := IgnitionConfig([]byte(doc), files)
			if err != nil {
				t.Fatal(err)
			}
			cfg, report, err := ignitionconfig.Parse(got)
			if err != nil {
				t.Fatalf("Ignition refuses the config written: %v\n%s\n%s", err, report, got)
			}
			var paths []string
			for _, f := range cfg.Storage.Files {
				paths = append(paths, f.Path)
			}
			if want := []string{"/etc/motd", "/etc/bcd/config.toml", "/etc/bcd/join-encryption.jwk"}; !slices.Equal(paths, want) {
				t.Errorf("Ignition reads the files %q, want %q\n%s", paths, want, got)
			}
		})
	}
	for name, doc := range map[string]string{
		"storage and Storage": `{"ignition":{"version":"3.4.0"},"storage":{},"Storage":{"files":[` + motd + `]}}`,
		"files and Files":     `{"ignition":{"version":"3.4.0"},"storage":{"files":[],"Files":[` + motd + `]}}`,
		"path and PATH":       `{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/etc/motd","PATH":"/etc/bcd/config.toml"}]}}`,
	} {
		t.Run(name, func(t *testing.T) {
			if got, err := IgnitionConfig([]byte(doc), files); err == nil {
				t.Errorf("accepted, writing %s", got)
			}
		})
	}
}

// osDisk makes a disk image with ext4 partitions of the given names.
func osDisk(t *testing.T, names ...string) *os.File {
	t.Helper()
	path := filepath.Join(t.TempDir(), "disk")
	gpttest.OSImage(t, path, names...)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// contents mounts a partition of disk and lists it.
func contents(t *testing.T, disk *os.File, number int) map[string]string {
	t.Helper()
	parts, err := gpt.Read(disk, 512)
	if err != nil {
		t.Fatal(err)
	}
	p := parts[number-1]
	m, err := mount.Partition(disk, p.Offset, p.Size)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unmount()
	return listing(t, m.Dir)
}

func TestInstall(t *testing.T) {
	t.Run("cloud-init into the root file system", func(t *testing.T) {
		disk := osDisk(t, "cloudimg-rootfs")
		if err := Install(disk, 512, files); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(cloudInitTree, contents(t, disk, 2)); diff != "" {
			t.Errorf("root file system (-want +got):\n%s", diff)
		}
	})
	t.Run("ignition onto the boot partition", func(t *testing.T) {
		disk := osDisk(t, "boot", "root")
		ign := files
		ign.Kind, ign.UserData = KindIgnition, []byte(`{"ignition":{"version":"3.4.0"}}`)
		if err := Install(disk, 512, ign); err != nil {
			t.Fatal(err)
		}
		got := contents(t, disk, 2)
		cfg, ok := got["ignition/config.ign"]
		if !ok || len(contents(t, disk, 3)) != 0 {
			t.Fatalf("boot partition %v; the root partition must stay untouched", got)
		}
		if cfg[:11] != "-rw------- " {
			t.Errorf("config.ign mode: %s", cfg[:10])
		}
	})
	t.Run("talos refused", func(t *testing.T) {
		disk := osDisk(t, "root")
		if err := Install(disk, 512, Files{Kind: KindTalos, UserData: []byte("x")}); !errors.Is(err, ErrUnsupported) {
			t.Fatalf("Install: %v, want ErrUnsupported", err)
		}
	})
}

// TestInstallStaysInItsPartition: the written OS is the image's, and an image can hold
// symbolic links where the files go: /etc to a directory of the ramdisk (its /run/bcd,
// or another disk mounted there), var/lib/cloud up through .. past its mount. Install
// writes nothing through them: it fails, and the directories they name stay empty.
// Before, MkdirAll and the writes followed them out of the partition.
func TestInstallStaysInItsPartition(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a loop device and a mount need root")
	}
	for name, plant := range map[string]func(outside string) map[string]string{
		"an absolute /etc": func(outside string) map[string]string { return map[string]string{"etc": outside} },
		"var/lib/cloud up through ..": func(outside string) map[string]string {
			return map[string]string{"var/lib/cloud": strings.Repeat("../", 16) + outside[1:]}
		},
		"the seed directory itself": func(outside string) map[string]string {
			return map[string]string{"var/lib/cloud/seed/nocloud": outside}
		},
		"an ignition directory": func(outside string) map[string]string { return map[string]string{"ignition": outside} },
	} {
		t.Run(name, func(t *testing.T) {
			outside := t.TempDir()
			kind, partName := files, "cloudimg-rootfs"
			if name == "an ignition directory" {
				kind.Kind, kind.UserData, partName = KindIgnition, []byte(`{"ignition":{"version":"3.4.0"}}`), "boot"
			}
			disk := osDisk(t, partName)
			plantLinks(t, disk, plant(outside))
			if err := Install(disk, 512, kind); err == nil {
				t.Error("Install succeeded through the image's symbolic links")
			}
			if got := listing(t, outside); len(got) != 0 {
				t.Fatalf("Install wrote outside the partition: %v", got)
			}
		})
	}
	t.Run("a link within the partition is followed", func(t *testing.T) {
		disk := osDisk(t, "cloudimg-rootfs")
		plantLinks(t, disk, map[string]string{"var/lib/cloud": "../../srv/cloud"})
		if err := Install(disk, 512, files); err != nil {
			t.Fatal(err)
		}
		if got := contents(t, disk, 2)["srv/cloud/seed/nocloud/user-data"]; got != "-rw------- #cloud-config\nhostname: n1\n" {
			t.Fatalf("user-data through the link: %q", got)
		}
	})
}

// plantLinks makes the symbolic links links (path: target) in partition 2 of disk, as
// the image would hold them.
func plantLinks(t *testing.T, disk *os.File, links map[string]string) {
	t.Helper()
	parts, err := gpt.Read(disk, 512)
	if err != nil {
		t.Fatal(err)
	}
	m, err := mount.Partition(disk, parts[1].Offset, parts[1].Size)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unmount()
	for path, target := range links {
		p := filepath.Join(m.Dir, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
}
