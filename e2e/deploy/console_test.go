package deploy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/better-compute/better-compute/registry/api"
	"github.com/better-compute/better-compute/testkit"
	"github.com/better-compute/better-compute/testkit/browser"
	"github.com/chromedp/chromedp"
)

// recordLive makes the node page record, in the tab's sessionStorage (which outlives a
// reload), every state of the timeline's rows and every row of the event log that a
// live update brings: only the server-sent events change #live without a reload.
const recordLive = `(() => {
  const live = document.getElementById("live");
  new MutationObserver(() => {
    const seen = JSON.parse(sessionStorage.getItem("seen") || "[]");
    for (const r of live.querySelectorAll("#timeline tr.step")) {
      seen.push(r.cells[1].textContent + " " + r.className.replace("step ", ""));
    }
    for (const r of live.querySelectorAll("#events tr.event")) {
      seen.push("event " + r.dataset.kind + " " + r.cells[4].textContent.trim().split(" ").pop() + " " + r.cells[5].textContent);
    }
    sessionStorage.setItem("seen", JSON.stringify(seen));
  }).observe(live, {childList: true, subtree: true});
  return "recording";
})()`

// TestConsoleFollowsADeployLive deploys a machine from the console in Chromium, as an
// operator would: the node's page, Deploy, the profile, the confirmation. The node's
// page then follows the workflow live: the image server holds the image halfway, the
// page shows deploy.deploy running, and once the image flows its end arrives on the same
// page, without a reload, before the node shows active, and so do the step's events in
// the node's event log. With BC_SCREENSHOTS set (make
// screenshots) it writes the console's main pages there.
func TestConsoleFollowsADeployLive(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a machine end to end")
	}
	w, id, m, gate, requested := heldDeploy(t, "52:54:00:12:38:01", "4c4c4544-0042-3510-8052-b4c04f5958c1")
	released := false
	defer func() {
		if !released {
			close(gate)
		}
	}()

	ctx := browser.Start(t, w.reg.URL)
	if err := chromedp.Do(ctx, chromedp.Navigate(w.reg.URL+"/ui/signin"), chromedp.WaitVisible(chromedp.ID("credential"))); err != nil {
		t.Fatal(err)
	}
	browser.Screenshot(t, ctx, "signin")
	cfg, err := api.LoadClientConfig(w.admin)
	if err != nil {
		t.Fatal(err)
	}
	if err := browser.SignIn(ctx, w.reg.URL, cfg.Credential); err != nil {
		t.Fatalf("sign in: %v", err)
	}

	err = chromedp.Do(ctx, chromedp.Navigate(w.reg.URL+"/ui/nodes/"+id), chromedp.Click(chromedp.ID("action-deploy")),
		chromedp.WaitVisible(chromedp.ID("profile")), chromedp.SetValue(chromedp.ID("profile"), "e2e-host"),
		chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("timeline")))
	if err != nil {
		t.Fatalf("deploy from the console: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[string](recordLive)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-requested:
	case <-time.After(time.Minute):
		console, _ := os.ReadFile(filepath.Join(m.dir, "console.log"))
		t.Fatalf("the ramdisk never asked for the image; console:\n%s", console)
	}
	running := func() bool {
		row, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => { const r = [...document.querySelectorAll("#timeline tr.step")].find(r => r.cells[1].textContent == "deploy.deploy"); return r ? r.className + " " + r.cells[5].textContent : "" })()`))
		return err == nil && strings.Contains(row, "running") && strings.Contains(row, "written")
	}
	if !waitFor(t, 30*time.Second, running) {
		t.Logf("the page showed no progress of deploy.deploy while the image was held")
	}
	browser.Screenshot(t, ctx, "node-live")
	close(gate)
	released = true

	active := func() bool {
		state, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("node-state")?.textContent || ""`))
		return err == nil && state == "active"
	}
	if !waitFor(t, 2*time.Minute, active) {
		got, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("main")))
		t.Fatalf("the node page never showed the node active:\n%s", got)
	}
	seen, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`JSON.parse(sessionStorage.getItem("seen") || "[]")`))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"deploy.deploy running", "deploy.deploy succeeded", "boot.kexec succeeded",
		"event step.started deploy.deploy ", "event step.ended deploy.deploy succeeded", "event step.ended boot.kexec succeeded"} {
		if !strings.Contains(strings.Join(seen, "\n"), want) {
			t.Errorf("the page's live updates never showed %q; they showed:\n%s", want, strings.Join(seen, "\n"))
		}
	}
	timeline, _ := chromedp.Run(ctx, chromedp.Text(chromedp.ID("timeline")))
	if strings.Contains(timeline, "running") || strings.Count(timeline, "succeeded") < 9 {
		t.Errorf("the finished timeline:\n%s", timeline)
	}
	if os.Getenv("BC_SCREENSHOTS") != "" {
		// The screenshot shows the node once bcd node converged its host section.
		waitFor(t, 30*time.Second, func() bool {
			var v api.NodeView
			testkit.JSON(t, w.admin, &v, "nodes", "get", id)
			return v.Agent != nil && v.Agent.DesiredGeneration >= 1 && v.Agent.ObservedGeneration == v.Agent.DesiredGeneration && v.Agent.Host != nil
		})
		if err := chromedp.Do(ctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("timeline"))); err != nil {
			t.Fatal(err)
		}
	}
	browser.Screenshot(t, ctx, "node")
	if err := chromedp.Do(ctx, chromedp.Navigate(w.reg.URL+"/ui/nodes"), chromedp.WaitVisible(chromedp.ID("nodes"))); err != nil {
		t.Fatal(err)
	}
	browser.Screenshot(t, ctx, "nodes")
	if err := chromedp.Do(ctx, chromedp.Navigate(w.reg.URL+"/ui/sites"), chromedp.WaitVisible(chromedp.ID("site-rack-a"))); err != nil {
		t.Fatal(err)
	}
	if got, _ := chromedp.Run(ctx, chromedp.Text(chromedp.ID("site-rack-a"))); !strings.Contains(got, "site reported") || !strings.Contains(got, "rack-a · connected since") {
		t.Errorf("the sites page shows no report of rack-a's agent, or not that it is connected:\n%s", got)
	}
	browser.Screenshot(t, ctx, "sites")
	if err := chromedp.Do(ctx, chromedp.Navigate(w.reg.URL+"/ui/images"), chromedp.WaitVisible(chromedp.ID("images"))); err != nil {
		t.Fatal(err)
	}
	if got, _ := chromedp.Run(ctx, chromedp.Text(chromedp.ID("images"))); !strings.Contains(got, "e2e-os@1") || !strings.Contains(got, "signature verified") {
		t.Errorf("the images page:\n%s", got)
	}
}
