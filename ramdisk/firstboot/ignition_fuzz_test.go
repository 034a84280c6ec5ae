package firstboot

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"reflect"
	"strings"
	"testing"

	"github.com/better-compute/better-compute/proto/bcdargv"
)

// FuzzIgnitionConfig feeds any user data of kind ignition to IgnitionConfig: nothing may
// panic; a document that is not an Ignition spec 3 object is refused; an accepted one
// comes back with every key but storage.files as it was, and storage.files holding the
// document's own entries but bcd's paths (a storage that is not an object, or files not
// an array, is refused rather than dropped), in order, then exactly one entry of each of
// bcd's files carrying its bytes. Each member on the way is the one Ignition reads, in any
// case (fold); a document with two of one is refused. Numbers are compared as their text
// (decodeExact), so one rounded on the way is caught.
func FuzzIgnitionConfig(f *testing.F) {
	for _, seed := range []string{
		`{"ignition":{"version":"3.4.0"},"systemd":{"units":[{"name":"bcd.service","enabled":true}]}}`,
		`{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/etc/bcd/join-token","mode":384},{"path":"/etc/bcd/config.toml"}]}}`,
		`{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/etc/bcd/config.toml"},{"path":"/etc/bcd/config.toml"},7,null]}}`,
		`{"ignition":{"version":"3.0.0"},"storage":{"files":{"path":"/etc/bcd/config.toml"}}}`,
		`{"ignition":{"version":"3.4.0"},"storage":[]}`,
		`{"ignition":{"version":"2.3.0"}}`, `{"ignition":{"version":3}}`, `{"ignition":[]}`,
		`ignition: {}`, `null`, `[]`, `{"ignition":{"version":"3."}} {}`,
		`{"ignition":{"version":"3.4.0"},"storage":{"disks":[{"partitions":[{"sizeMiB":9007199254740993}]}],"files":[{"path":"/a","x":1e400}]}}`,
		`{"ignition":{"version":"3.4.0"},"storage":null}`,
		`{"Ignition":{"VERSION":"3.4.0"},"Storage":{"Files":[{"Path":"/etc/bcd/config.toml"},{"path":"/etc/motd"}]}}`,
		`{"ignition":{"version":"3.4.0"},"storage":{},"STORAGE":{"files":[]}}`,
	} {
		f.Add([]byte(seed))
	}
	bcdFiles := map[string][]byte{
		path.Join(bcdargv.ConfigDir, bcdargv.ConfigFile):         files.Config,
		path.Join(bcdargv.ConfigDir, bcdargv.JoinEncryptionFile): files.JoinEncryptionKey,
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		got, err := IgnitionConfig(doc, files)
		var in map[string]any
		if decodeExact(doc, &in) != nil {
			if err == nil {
				t.Fatalf("%q: accepted a document that is not a JSON object", doc)
			}
			return
		}
		ignValue, _, n := fold(in, "ignition")
		ign, _ := ignValue.(map[string]any)
		version, _, m := fold(ign, "version")
		storageValue, storageKey, k := fold(in, "storage")
		storageIn, isObject := storageValue.(map[string]any)
		filesValue, filesKey, l := fold(storageIn, "files")
		if n > 1 || m > 1 {
			if err == nil {
				t.Fatalf("%q: accepted two members Ignition reads as one", doc)
			}
			return
		}
		if v, _ := version.(string); !strings.HasPrefix(v, "3.") {
			if !errors.Is(err, ErrUnsupported) {
				t.Fatalf("%q: %v, want ErrUnsupported", doc, err)
			}
			return
		}
		old, isArray := filesValue.([]any)
		twice := k > 1 || l > 1
		for _, e := range old {
			if m, ok := e.(map[string]any); ok {
				_, _, n := fold(m, "path")
				twice = twice || n > 1
			}
		}
		if twice || (storageValue != nil && !isObject) || (filesValue != nil && !isArray) {
			if err == nil {
				t.Fatalf("%q: accepted two members Ignition reads as one, or dropped a storage or storage.files of another type", doc)
			}
			return
		}
		if err != nil {
			t.Fatalf("%q: %v", doc, err)
		}
		var out map[string]any
		if err := decodeExact(got, &out); err != nil {
			t.Fatalf("%q: the config written is not JSON: %v", doc, err)
		}
		storage, _ := out[storageKey].(map[string]any)
		written, _ := storage[filesKey].([]any)
		want := []any{}
		for _, e := range old {
			if m, ok := e.(map[string]any); ok {
				p, _, _ := fold(m, "path")
				if p, _ := p.(string); bcdFiles[p] != nil {
					continue
				}
			}
			want = append(want, e)
		}
		if len(written) != len(want)+len(bcdFiles) || !reflect.DeepEqual(written[:len(want)], want) {
			t.Fatalf("%q: storage.files %v, want the document's own %v then bcd's", doc, written, want)
		}
		for _, e := range written[len(want):] {
			m, _ := e.(map[string]any)
			p, _ := m["path"].(string)
			contents, _ := m["contents"].(map[string]any)
			source, _ := contents["source"].(string)
			data, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(source, "data:;base64,"))
			if bcdFiles[p] == nil || err != nil || string(data) != string(bcdFiles[p]) {
				t.Fatalf("%q: entry %v does not carry one of bcd's files", doc, e)
			}
		}
		delete(in, storageKey)
		delete(out, storageKey)
		if storageIn != nil {
			delete(storageIn, filesKey)
			delete(storage, filesKey)
			in[storageKey], out[storageKey] = storageIn, storage
		}
		if !reflect.DeepEqual(in, out) {
			t.Fatalf("%q: the config's other keys changed: %v, want %v", doc, out, in)
		}
	})
}

// decodeExact decodes data, one JSON value, as json.Unmarshal does but keeping each
// number as its text (json.Number).
func decodeExact(data []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		return err
	}
	if _, err := d.Token(); err != io.EOF {
		return fmt.Errorf("more after the JSON value: %v", err)
	}
	return nil
}

// fold returns the member of m Ignition reads as the field name (in any case), its key
// (name when there is none) and how many members of m it reads so.
func fold(m map[string]any, name string) (value any, key string, n int) {
	key = name
	for k, v := range m {
		if strings.EqualFold(k, name) {
			value, key, n = v, k, n+1
		}
	}
	return value, key, n
}
