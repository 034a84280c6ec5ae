package kexec

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

func TestParseEntry(t *testing.T) {
	cases := map[string]struct {
		text    string
		want    Entry
		wantErr bool
	}{
		"fedora": {text: "title Fedora Linux (6.5.6-300.fc39.x86_64) 39\nversion 6.5.6-300.fc39.x86_64\n" +
			"linux /vmlinuz-6.5.6-300.fc39.x86_64\ninitrd /initramfs-6.5.6-300.fc39.x86_64.img\n" +
			"options root=UUID=1234 ro rootflags=subvol=root\ngrub_users $grub_users\ngrub_class fedora\n",
			want: Entry{Title: "Fedora Linux (6.5.6-300.fc39.x86_64) 39", Version: "6.5.6-300.fc39.x86_64",
				Linux: "/vmlinuz-6.5.6-300.fc39.x86_64", Initrd: []string{"/initramfs-6.5.6-300.fc39.x86_64.img"},
				Options: "root=UUID=1234 ro rootflags=subvol=root"}},
		"tabs, comments, repeated keys": {text: "# generated\ntitle\tOS\nlinux\t/k\ninitrd /ucode.img\ninitrd\t/initrd.img\n" +
			"options  a=1\noptions b=2  c\n",
			want: Entry{Title: "OS", Linux: "/k", Initrd: []string{"/ucode.img", "/initrd.img"}, Options: "a=1 b=2  c"}},
		"no kernel": {text: "title Nothing\noptions quiet\n", wantErr: true},
		"empty":     {text: "", wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseEntry(tc.text)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseEntry: %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("entry (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCompareVersions(t *testing.T) {
	ordered := []string{"0-rescue-abc", "5.14.0-70.el9", "5.14.0-362.el9", "6.5.6-300.fc39.x86_64", "6.5.10-300.fc39.x86_64", "6.10.1"}
	for i := range ordered {
		for j := range ordered {
			got := compareVersions(ordered[i], ordered[j])
			if (i < j && got >= 0) || (i > j && got <= 0) || (i == j && got != 0) {
				t.Errorf("compareVersions(%q, %q) = %d", ordered[i], ordered[j], got)
			}
		}
	}
}

// osTree makes a written OS's files under a temporary directory.
func osTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for path, content := range files {
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if target, ok := strings.CutPrefix(content, "->"); ok {
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestFind(t *testing.T) {
	const grub = "set default=0\nmenuentry 'Debian GNU/Linux' {\n\tlinux\t/boot/vmlinuz-6.1.0-26-cloud-amd64 root=PARTUUID=aa-bb ro console=tty0 console=ttyS0,115200 $vt_handoff\n\tinitrd /boot/initrd.img\n}\n"
	cases := map[string]struct {
		files map[string]string
		// sepBoot puts boot/ in a directory of its own, as a separate partition.
		sepBoot bool
		want    func(root, boot string) Boot
		wantErr error
	}{
		"boot loader entries on a boot partition": {
			files: map[string]string{
				"boot/loader/entries/abc-6.5.6-300.fc39.x86_64.conf": "title new\nversion 6.5.6-300.fc39.x86_64\nlinux /vmlinuz-6.5.6\ninitrd /initramfs-6.5.6.img\noptions root=UUID=r ro\n",
				"boot/loader/entries/abc-6.4.9-200.fc39.x86_64.conf": "title old\nversion 6.4.9-200.fc39.x86_64\nlinux /vmlinuz-6.4.9\noptions old\n",
				"boot/loader/entries/abc-0-rescue.conf":              "title rescue\nversion 0-rescue-abc\nlinux /vmlinuz-0-rescue\n",
				"boot/vmlinuz-6.5.6":                                 "K", "boot/initramfs-6.5.6.img": "I",
			},
			sepBoot: true,
			want: func(root, boot string) Boot {
				return Boot{Kernel: filepath.Join(boot, "vmlinuz-6.5.6"), Initrds: []string{filepath.Join(boot, "initramfs-6.5.6.img")}, Cmdline: "root=UUID=r ro"}
			},
		},
		"an entry cannot reach outside its partition": {
			files:   map[string]string{"boot/loader/entries/a.conf": "linux /../../etc/shadow\n", "boot/etc/shadow": "S", "etc/shadow": "S"},
			sepBoot: true,
			want:    func(root, boot string) Boot { return Boot{Kernel: filepath.Join(boot, "etc/shadow")} },
		},
		"debian symlinks and grub.cfg": {
			files: map[string]string{"boot/vmlinuz": "->vmlinuz-6.1.0-26-cloud-amd64", "boot/vmlinuz-6.1.0-26-cloud-amd64": "K",
				"boot/initrd.img": "->initrd.img-6.1.0-26-cloud-amd64", "boot/initrd.img-6.1.0-26-cloud-amd64": "I", "boot/grub/grub.cfg": grub},
			want: func(root, boot string) Boot {
				return Boot{Kernel: filepath.Join(root, "boot/vmlinuz"), Initrds: []string{filepath.Join(root, "boot/initrd.img")},
					Cmdline: "root=PARTUUID=aa-bb ro console=tty0 console=ttyS0,115200"}
			},
		},
		"symlinks at the root, /etc/kernel/cmdline": {
			files: map[string]string{"vmlinuz": "K", "etc/kernel/cmdline": "root=LABEL=root  quiet\n", "boot/grub/grub.cfg": grub},
			want: func(root, boot string) Boot {
				return Boot{Kernel: filepath.Join(root, "vmlinuz"), Cmdline: "root=LABEL=root quiet"}
			},
		},
		"no command line anywhere": {
			files: map[string]string{"boot/vmlinuz": "K", "boot/initrd.img": "I"},
			want: func(root, boot string) Boot {
				return Boot{Kernel: filepath.Join(root, "boot/vmlinuz"), Initrds: []string{filepath.Join(root, "boot/initrd.img")},
					Cmdline: "root=PARTUUID=0fc63daf-8483-4772-8e79-3d69d8477de4 ro"}
			},
		},
		"no kernel": {files: map[string]string{"etc/os-release": "ID=x\n"}, wantErr: ErrNotFound},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			root := osTree(t, tc.files)
			boot := ""
			if tc.sepBoot {
				boot = filepath.Join(root, "boot")
			}
			got, err := Find(root, boot, "0fc63daf-8483-4772-8e79-3d69d8477de4")
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Find: %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want(root, boot), got); diff != "" {
				t.Errorf("boot (-want +got):\n%s", diff)
			}
		})
	}
}

func FuzzParseEntry(f *testing.F) {
	f.Add("title Fedora\nversion 6.5\nlinux /vmlinuz\ninitrd /a /b\noptions root=UUID=x ro\n")
	f.Add("linux\t/k\n# c\noptions\n")
	f.Add("")
	f.Fuzz(func(t *testing.T, text string) {
		e, err := ParseEntry(text)
		if err == nil && e.Linux == "" {
			t.Fatal("an entry without a kernel was accepted")
		}
	})
}

// FuzzGrubCmdline reads any grub.cfg: the arguments found are the fields after the kernel
// of one linux line, without GRUB variables, on one line.
func FuzzGrubCmdline(f *testing.F) {
	f.Add("menuentry 'Ubuntu' {\n\tlinux /boot/vmlinuz-6.8 root=UUID=1 ro $vt_handoff quiet\n\tinitrd /boot/initrd.img\n}\n")
	f.Add("linuxefi /vmlinuz\n")
	f.Add("linux\n")
	f.Add("")
	f.Fuzz(func(t *testing.T, cfg string) {
		args, ok := GrubCmdline(cfg)
		if !ok {
			if args != "" {
				t.Fatalf("no linux line, yet %q", args)
			}
			return
		}
		if strings.ContainsAny(args, "$\n") {
			t.Fatalf("arguments %q hold a variable or a line break", args)
		}
		// The arguments are those of the first linux line, in order, some left out.
		for line := range strings.Lines(cfg) {
			f := strings.Fields(line)
			if len(f) < 2 || (f[0] != "linux" && f[0] != "linuxefi") {
				continue
			}
			rest := f[2:]
			for _, a := range strings.Fields(args) {
				i := slices.Index(rest, a)
				if i < 0 {
					t.Fatalf("%q are not arguments of the first linux line %q", args, line)
				}
				rest = rest[i+1:]
			}
			return
		}
		t.Fatal("found arguments without a linux line")
	})
}

// TestFindStaysInTheWrittenOS: the written OS is the image's, and its symbolic links
// may point anywhere in the ramdisk (its config dir, its own kernel, another disk).
// Find reads nothing and names no file through a link that leaves the OS's partition,
// absolute or climbing out with ..: the kernel and initrds kexec would load, the
// command line it would hand the new kernel, the boot entries. Before, a /boot/initrd.img
// linked to the ramdisk's files was loaded into the tenant's kernel's memory, and an
// /etc/kernel/cmdline linked to one became its /proc/cmdline.
func TestFindStaysInTheWrittenOS(t *testing.T) {
	outside := osTree(t, map[string]string{"vmlinuz": "K", "secret": "bc-ramdisk-secret",
		"entries/a.conf": "linux /vmlinuz\noptions bc-ramdisk-secret\n"})
	up := func(p string) string { return strings.Repeat("../", 16) + filepath.Join(outside, p)[1:] }
	cases := map[string]map[string]string{
		"an absolute kernel link":       {"boot/vmlinuz": "->" + filepath.Join(outside, "vmlinuz")},
		"an initrd link climbing out":   {"boot/vmlinuz": "K", "boot/initrd.img": "->" + up("secret")},
		"a boot entry's initrd link":    {"boot/loader/entries/a.conf": "linux /k\ninitrd /i\n", "boot/k": "K", "boot/i": "->" + up("secret")},
		"a command line link":           {"boot/vmlinuz": "K", "etc/kernel/cmdline": "->" + filepath.Join(outside, "secret")},
		"a grub.cfg link":               {"boot/vmlinuz": "K", "boot/grub": "->" + outside},
		"the boot entries' directory":   {"boot/loader/entries": "->" + filepath.Join(outside, "entries")},
		"a link to the ramdisk's /boot": {"boot": "->" + outside},
	}
	if err := os.WriteFile(filepath.Join(outside, "grub.cfg"), []byte("linux /vmlinuz bc-ramdisk-secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, files := range cases {
		t.Run(name, func(t *testing.T) {
			root := osTree(t, files)
			b, err := Find(root, "", "0fc63daf-8483-4772-8e79-3d69d8477de4")
			if err != nil {
				return
			}
			if strings.Contains(b.Cmdline, "bc-ramdisk-secret") {
				t.Errorf("the command line holds the ramdisk's file: %q", b.Cmdline)
			}
			for _, p := range append([]string{b.Kernel}, b.Initrds...) {
				real, err := filepath.EvalSymlinks(p)
				if err == nil && !strings.HasPrefix(real, root+"/") {
					t.Errorf("Find names %s, which is %s outside the written OS", p, real)
				}
			}
		})
	}
}

// TestFindReadsOnlyFilesOfTheirSize: the files Find reads are the image's, and the
// image may hold a FIFO in their place (opening it waits for a writer that never comes)
// or a file far larger than any real one (sparse: a gigabyte for nothing). Find reads
// only regular files of at most 1 MiB, and otherwise goes on as without the file: the
// next place for the command line, or an error for a boot entry. Before, it waited on
// the FIFO for ever, and read the gigabyte whole onto the command line.
func TestFindReadsOnlyFilesOfTheirSize(t *testing.T) {
	const uuid = "0fc63daf-8483-4772-8e79-3d69d8477de4"
	for name, tc := range map[string]struct {
		file    string
		other   map[string]string
		fifo    bool
		wantErr bool
	}{
		"a FIFO for /etc/kernel/cmdline": {file: "etc/kernel/cmdline", fifo: true},
		"a FIFO for grub.cfg":            {file: "boot/grub/grub.cfg", fifo: true},
		"a FIFO for a boot entry":        {file: "boot/loader/entries/a.conf", fifo: true, wantErr: true},
		"a gigabyte of command line":     {file: "etc/kernel/cmdline"},
	} {
		t.Run(name, func(t *testing.T) {
			root := osTree(t, map[string]string{"boot/vmlinuz": "K"})
			p := filepath.Join(root, tc.file)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			var err error
			if tc.fifo {
				err = unix.Mkfifo(p, 0o644)
			} else {
				err = os.WriteFile(p, []byte("quiet"), 0o644)
				if err == nil {
					err = os.Truncate(p, 1<<30)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			type found struct {
				b   Boot
				err error
			}
			done := make(chan found, 1)
			go func() {
				b, err := Find(root, "", uuid)
				done <- found{b, err}
			}()
			var got found
			select {
			case got = <-done:
			case <-time.After(10 * time.Second):
				// Let the goroutine go: open the FIFO's other end.
				if f, err := os.OpenFile(p, os.O_WRONLY, 0); err == nil {
					f.Close()
				}
				<-done
				t.Fatal("Find waited on the image's FIFO")
			}
			if tc.wantErr {
				if got.err == nil {
					t.Fatalf("Find: %+v, want an error", got.b)
				}
				return
			}
			if got.err != nil {
				t.Fatal(got.err)
			}
			if want := "root=PARTUUID=" + uuid + " ro"; got.b.Cmdline != want {
				t.Errorf("command line of %d bytes, want %q", len(got.b.Cmdline), want)
			}
		})
	}
}

// TestLoadBoundsTheInitrds: the written image's boot entry names the initrds Load
// concatenates in the ramdisk's memory; two sparse files of 600 MiB, or one file of
// 64 MiB named 17 times (a 64 KiB entry can name one thousands of times), come to more
// than MaxInitrdBytes and are refused before anything is copied; two of 64 MiB are
// joined and reach the kernel. Before, they were copied whole into a memory file: as
// much of the ramdisk's RAM as the entry asked.
func TestLoadBoundsTheInitrds(t *testing.T) {
	for name, tc := range map[string]struct {
		sizes map[string]int64
		names string
		fits  bool
	}{
		"two sparse files": {sizes: map[string]int64{"a.img": 600 << 20, "b.img": 600 << 20}, names: "/a.img /b.img"},
		"one file many times": {sizes: map[string]int64{"a.img": 64 << 20},
			names: strings.Repeat("/a.img ", MaxInitrdBytes/(64<<20)+1)},
		"two within the bound": {sizes: map[string]int64{"a.img": 64 << 20, "b.img": 64 << 20},
			names: "/a.img /b.img", fits: true},
	} {
		t.Run(name, func(t *testing.T) {
			boot := osTree(t, map[string]string{
				"vmlinuz":                "not a kernel",
				"loader/entries/os.conf": "title OS\nversion 1\nlinux /vmlinuz\ninitrd " + tc.names + "\n",
			})
			for f, size := range tc.sizes {
				if err := os.WriteFile(filepath.Join(boot, f), nil, 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Truncate(filepath.Join(boot, f), size); err != nil {
					t.Fatal(err)
				}
			}
			b, err := Find(osTree(t, nil), boot, "0fc63daf-8483-4772-8e79-3d69d8477de4")
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			err = Load(b)
			if tc.fits {
				// Joined, then handed to the kernel, which refuses what is no kernel.
				if err == nil || errors.Is(err, ErrInitrdsTooLarge) || !strings.Contains(err.Error(), "kexec_file_load") {
					t.Fatalf("Load of initrds within the bound: %v, want kexec_file_load's refusal", err)
				}
				return
			}
			if !errors.Is(err, ErrInitrdsTooLarge) {
				t.Fatalf("Load of %d initrds after %v: %v, want ErrInitrdsTooLarge", len(b.Initrds), time.Since(start).Round(time.Millisecond), err)
			}
		})
	}
}
