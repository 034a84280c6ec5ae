package proto

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSameProductUUID(t *testing.T) {
	const enrolled = "4c4c4544-0035-4410-8052-b2c04f4a4d32"
	cases := map[string]struct {
		reported string
		want     bool
	}{
		"same":                  {"4c4c4544-0035-4410-8052-b2c04f4a4d32", true},
		"upper case":            {"4C4C4544-0035-4410-8052-B2C04F4A4D32", true},
		"braces":                {"{4c4c4544-0035-4410-8052-b2c04f4a4d32}", true},
		"no hyphens":            {"4c4c4544003544108052b2c04f4a4d32", true},
		"spaces around":         {"  4c4c4544-0035-4410-8052-b2c04f4a4d32\n", true},
		"first groups swapped":  {"44454c4c-3500-1044-8052-b2c04f4a4d32", true},
		"swapped, upper braces": {"{44454C4C-3500-1044-8052-B2C04F4A4D32}", true},
		"only first swapped":    {"44454c4c-0035-4410-8052-b2c04f4a4d32", false},
		"last group swapped":    {"4c4c4544-0035-4410-5280-324d4a4fc0b2", false},
		"another machine":       {"4c4c4544-0035-4410-8052-b2c04f4a4d33", false},
		"hyphens misplaced":     {"4c4c454-40035-4410-8052-b2c04f4a4d32", false},
		"not hex":               {"4c4c4544-0035-4410-8052-b2c04f4a4dzz", false},
		"empty":                 {"", false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := SameProductUUID(enrolled, tc.reported); got != tc.want {
				t.Errorf("SameProductUUID(%q, %q) = %v, want %v", enrolled, tc.reported, got, tc.want)
			}
			if got := SameProductUUID(tc.reported, enrolled); got != tc.want {
				t.Errorf("not symmetric for %q", tc.reported)
			}
		})
	}
}

// TestSwappedProductUUID: the other spelling of a UUID, as the store's enrollment index
// checks it; none for a UUID both of whose spellings are one, or for what is no UUID.
func TestSwappedProductUUID(t *testing.T) {
	for in, want := range map[string]string{
		"4c4c4544-0035-4410-8052-b2c04f4a4d32":   "44454c4c-3500-1044-8052-b2c04f4a4d32",
		"{44454C4C-3500-1044-8052-B2C04F4A4D32}": "4c4c4544-0035-4410-8052-b2c04f4a4d32",
		"12343412-5656-7878-8052-b2c04f4a4d32":   "",
		"Not Settable":                           "",
	} {
		if got, ok := SwappedProductUUID(in); got != want || ok != (want != "") {
			t.Errorf("SwappedProductUUID(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

func TestCheckIdentity(t *testing.T) {
	uuid := "4c4c4544-0035-4410-8052-b2c04f4a4d32"
	nics := []NICInfo{{Name: "eno1", MAC: "3c:ec:ef:00:00:01"}, {Name: "eno2", MAC: "3c:ec:ef:00:00:02"}}
	cases := map[string]struct {
		want    Identity
		system  SystemInfo
		nics    []NICInfo
		wantErr bool
	}{
		"uuid and mac match":          {Identity{uuid, "3c:ec:ef:00:00:02"}, SystemInfo{ProductUUID: uuid}, nics, false},
		"mac in another spelling":     {Identity{"", "3C-EC-EF-00-00-01"}, SystemInfo{}, nics, false},
		"uuid byte-swapped":           {Identity{uuid, ""}, SystemInfo{ProductUUID: "44454C4C-3500-1044-8052-B2C04F4A4D32"}, nil, false},
		"nothing enrolled":            {Identity{}, SystemInfo{ProductUUID: uuid}, nil, false},
		"no uuid reported":            {Identity{uuid, ""}, SystemInfo{}, nil, false},
		"another uuid":                {Identity{uuid, ""}, SystemInfo{ProductUUID: "00000000-0000-0000-0000-000000000001"}, nics, true},
		"bound mac absent":            {Identity{uuid, "3c:ec:ef:00:00:09"}, SystemInfo{ProductUUID: uuid}, nics, true},
		"bound mac, no nics reported": {Identity{"", "3c:ec:ef:00:00:01"}, SystemInfo{}, nil, true},
		"garbage uuid reported":       {Identity{uuid, ""}, SystemInfo{ProductUUID: "Not Settable"}, nics, true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := CheckIdentity(tc.want, tc.system, tc.nics)
			if !tc.wantErr {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			e := AsError(err)
			if diff := cmp.Diff([2]string{string(DriverError), ReasonIdentityMismatch}, [2]string{string(e.Code), e.Details.Reason}); diff != "" {
				t.Errorf("error %v (-want +got):\n%s", err, diff)
			}
		})
	}
}

func FuzzParseProductUUID(f *testing.F) {
	for _, s := range []string{"4c4c4544-0035-4410-8052-b2c04f4a4d32", "{44454C4C-3500-1044-8052-B2C04F4A4D32}",
		"4c4c4544003544108052b2c04f4a4d32", "", "{}", "----"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := ParseProductUUID(s)
		if err != nil {
			return
		}
		canonical := hexUUID(u)
		again, err := ParseProductUUID(canonical)
		if err != nil || again != u {
			t.Fatalf("%q parsed to %x, whose spelling %q reads back as %x, %v", s, u, canonical, again, err)
		}
		if !SameProductUUID(s, canonical) || !SameProductUUID(hexUUID(swapped(u)), s) {
			t.Fatalf("%q is not the same as its own spellings", s)
		}
		if other, ok := SwappedProductUUID(s); ok != (swapped(u) != u) || ok && other != hexUUID(swapped(u)) {
			t.Fatalf("SwappedProductUUID(%q) = %q, %v; want %q", s, other, ok, hexUUID(swapped(u)))
		}
	})
}

func hexUUID(u [16]byte) string {
	const digits = "0123456789abcdef"
	var b []byte
	for i, c := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b = append(b, '-')
		}
		b = append(b, digits[c>>4], digits[c&15])
	}
	return string(b)
}
