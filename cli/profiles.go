package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"text/tabwriter"

	flag "github.com/spf13/pflag"

	"github.com/better-compute/better-compute/cmdline"
	"github.com/better-compute/better-compute/registry/api"
)

var profileCommands = []command{{
	path:    "profiles create",
	usage:   "FILE [--tenant T] [--public]",
	summary: "store a new profile version from a JSON document (private unless --public)",
	long: "store a new profile version (private by default); an existing or deleted version, or a shipped id, is " +
		"`CONFLICT`; one past the tenant's bound of profile versions, deleted ones a workflow ran included (serve " +
		"`--tenant-profile-versions`), `INVALID_STATE` reason `quota` (docs/security.md#what-a-tenant-may-hold-in-the-store)",
	nargs: 1,
	define: func(fs *flag.FlagSet) func(x *exec) error {
		tenant := tenantFlag(fs)
		public := fs.Bool("public", false, "make the version visible to every tenant")
		return func(x *exec) error {
			doc, err := readFile(x.args[0])
			if err != nil {
				return err
			}
			req := api.CreateProfileRequest{TenantID: *tenant, Document: doc, Visibility: visibility(*public)}
			var out api.ProfileView
			if err := x.call("profiles.create", req, &out); err != nil {
				return err
			}
			x.print(out, func(w *tabwriter.Writer) { profileTable(w, []api.ProfileView{out}) })
			return nil
		}
	},
}, {
	path:    "profiles get",
	usage:   "ID [--tenant T] [--profile-version N]",
	summary: "show one profile version with its document (the latest by default)",
	long: "one version with its document; the latest by default. `ID`, here and in `validate`, " +
		"`render` and `nodes deploy --profile`, may be `TENANT/ID`: another tenant's public profile",
	nargs: 1,
	define: func(fs *flag.FlagSet) func(x *exec) error {
		key := profileKeyFlags(fs, latestVersion)
		return func(x *exec) error {
			var out api.ProfileView
			if err := x.call("profiles.get", key(x), &out); err != nil {
				return err
			}
			x.print(out, func(w *tabwriter.Writer) {
				profileTable(w, []api.ProfileView{out})
				fmt.Fprintf(w, "\n%s\n", indentJSON(out.Document))
			})
			return nil
		}
	},
}, {
	path:    "profiles list",
	usage:   "[--tenant T] [--cursor C]",
	summary: "list the tenant's own, public and shipped profiles, 200 a page",
	define: func(fs *flag.FlagSet) func(x *exec) error {
		tenant := tenantFlag(fs)
		cursor := fs.String("cursor", "", "resume after a previous page")
		return func(x *exec) error {
			var out api.ProfileList
			req := api.ListProfilesRequest{TenantID: *tenant, ListRequest: api.ListRequest{Cursor: *cursor}}
			if err := x.call("profiles.list", req, &out); err != nil {
				return err
			}
			x.print(out, func(w *tabwriter.Writer) {
				profileTable(w, out.Profiles)
				nextPage(w, out.NextCursor)
			})
			return nil
		}
	},
}, {
	path:    "profiles validate",
	usage:   "ID [--tenant T] [--profile-version N] | --file FILE",
	summary: "report every problem of a stored version, or of a document not yet stored",
	nargs:   -1,
	long:    "every problem at once, each with its path; exits 1 when there are any",
	define: func(fs *flag.FlagSet) func(x *exec) error {
		key := profileKeyFlags(fs, latestVersion)
		file := fs.String("file", "", "check this document instead of a stored version")
		return func(x *exec) error {
			req := api.ValidateProfileRequest{}
			switch {
			case *file != "" && len(x.args) == 0:
				doc, err := readFile(*file)
				if err != nil {
					return err
				}
				req.Document = doc
			case *file == "" && len(x.args) == 1:
				req.ProfileKey = key(x)
			case *file == "" && len(x.args) == 0:
				return cmdline.Usagef("ID", "profiles validate needs a profile: the ID of a stored one, or --file FILE for a document not yet stored")
			default:
				return cmdline.Usagef("--file", "profiles validate takes the ID of a stored profile or --file FILE, not both")
			}
			var out api.Validation
			if err := x.call("profiles.validate", req, &out); err != nil {
				return err
			}
			x.print(out, func(w *tabwriter.Writer) {
				if out.Valid {
					fmt.Fprintln(w, "valid: no problems found")
					return
				}
				fmt.Fprintf(w, "%d problem(s):\n\nPATH\tCODE\tPROBLEM\n", len(out.Issues))
				for _, is := range out.Issues {
					fmt.Fprintf(w, "%s\t%s\t%s\n", is.Path, is.Code, is.Message)
				}
			})
			if !out.Valid {
				return errReported
			}
			return nil
		}
	},
}, {
	path:    "profiles render",
	usage:   "ID [--tenant T] [--profile-version N]",
	summary: "show the expanded steps a workflow of this profile would run",
	long:    "the steps a workflow would run: where, timeout, retries, input with defaults",
	nargs:   1,
	define: func(fs *flag.FlagSet) func(x *exec) error {
		key := profileKeyFlags(fs, latestVersion)
		return func(x *exec) error {
			var out api.Rendering
			if err := x.call("profiles.render", key(x), &out); err != nil {
				return err
			}
			x.print(out, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "%s@%d (tenant %s)\n\n", out.ID, out.Version, out.TenantID)
				renderTable(w, out)
			})
			return nil
		}
	},
}, {
	path:    "profiles update",
	usage:   "ID (--file F | --visibility private|public) [--tenant T] [--profile-version N] [--if-version REV]",
	summary: "replace an unused version's document, or change a version's visibility",
	nargs:   1,
	long:    "replace an unused version's document, or change visibility",
	define: func(fs *flag.FlagSet) func(x *exec) error {
		key := profileKeyFlags(fs, "the version whose visibility changes (default: the latest); with --file the document names the version it replaces, and a version given must be that one")
		file := fs.String("file", "", "replacement document (its id and version name the row)")
		vis := fs.String("visibility", "", "private or public")
		ifVersion := new(int)
		fs.Var(cmdline.Decimal(ifVersion, 0), "if-version", "refuse unless the row's version (rev) is this")
		return func(x *exec) error {
			req := api.UpdateProfileRequest{ProfileKey: key(x), Visibility: *vis, IfVersion: *ifVersion}
			if *file != "" {
				doc, err := readFile(*file)
				if err != nil {
					return err
				}
				req.Document = doc
			}
			var out api.ProfileView
			if err := x.call("profiles.update", req, &out); err != nil {
				return err
			}
			x.print(out, func(w *tabwriter.Writer) { profileTable(w, []api.ProfileView{out}) })
			return nil
		}
	},
}, {
	path:    "profiles delete",
	usage:   "ID [--tenant T] [--profile-version N]",
	summary: "hide one version (or all) from new workflows; running ones keep their steps",
	nargs:   1,
	define: func(fs *flag.FlagSet) func(x *exec) error {
		key := profileKeyFlags(fs, "the version to hide (default: every version of the profile)")
		return func(x *exec) error {
			var out api.DeletedProfiles
			if err := x.call("profiles.delete", key(x), &out); err != nil {
				return err
			}
			x.print(out, func(w *tabwriter.Writer) { fmt.Fprintf(w, "deleted %s versions %v\n", out.ID, out.Versions) })
			return nil
		}
	},
}}

// tenantFlag declares --tenant.
func tenantFlag(fs *flag.FlagSet) *string {
	return fs.String("tenant", "", "tenant to act for (default: the credential's own)")
}

// latestVersion is the help of --profile-version where the method takes the latest
// version when it is left out.
const latestVersion = "profile version (default: the latest)"

// profileKeyFlags declares --tenant and --profile-version, with versionHelp saying what
// leaving it out means to the command's method, and returns what builds the key from
// them and the ID argument.
func profileKeyFlags(fs *flag.FlagSet, versionHelp string) func(x *exec) api.ProfileKey {
	tenant := tenantFlag(fs)
	version := new(int)
	fs.Var(cmdline.Decimal(version, 0), "profile-version", versionHelp)
	return func(x *exec) api.ProfileKey {
		k := api.ProfileKey{TenantID: *tenant, ProfileVersion: *version}
		if len(x.args) > 0 {
			k.ID = x.args[0]
		}
		return k
	}
}

func visibility(public bool) string {
	if public {
		return "public"
	}
	return "private"
}

func profileTable(w *tabwriter.Writer, rows []api.ProfileView) {
	fmt.Fprintln(w, "PROFILE\tVERSION\tTENANT\tVISIBILITY\tREV\tUSED")
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%d\t%v\n", r.ID, r.Version, r.TenantID, r.Visibility, r.Rev, r.Used)
	}
}

// indentJSON is raw indented, its text as it is (json.MarshalIndent wrote <, > and & as
// \u003c...), or raw itself when it is not JSON.
func indentJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Indent(&b, raw, "", "  ") != nil {
		return string(raw)
	}
	return b.String()
}

func renderTable(w *tabwriter.Writer, r api.Rendering) {
	fmt.Fprintln(w, "PHASE\t#\tSTEP\tRUNS ON\tTIMEOUT\tRETRIES\tON FAILURE\tAWAIT\tWHEN\tWITH")
	for _, s := range r.Steps {
		renderRow(w, s, "")
		if s.Fallback != nil {
			renderRow(w, *s.Fallback, "  fallback: ")
		}
	}
}

func renderRow(w *tabwriter.Writer, s api.RenderedStep, prefix string) {
	fmt.Fprintf(w, "%s\t%d\t%s%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", s.Phase, s.Index, prefix, s.Use, s.On,
		s.Timeout, s.Retries, s.OnFailure, dash(s.Await), dash(s.When), dash(string(s.With)))
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
