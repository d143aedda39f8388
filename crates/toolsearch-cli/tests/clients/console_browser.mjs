// Drives the gateway's web console in headless Chromium (Debian's /usr/bin/chromium, through
// playwright-core) and prints what the page showed as JSON.
//
//     node console_browser.mjs --url http://127.0.0.1:PORT/ --plan PLAN_JSON --shots DIR
//
// Run it from the folder whose node_modules holds playwright-core (.test-peers/node).
//
// PLAN_JSON is a list of steps run in order on one page:
//   {"op": "upstreams"}                      -> {"rows": [{"server", "state", "tools"}]}
//   {"op": "wait_state", "server": S, "state": T}
//                                            -> the rows once S shows state T on the page
//   {"op": "wait_text", "server": S, "text": T}
//                                            -> {"row": "..."} once S's row (its stderr tail included) holds T
//   {"op": "catalog", "tool": N}             -> {"count": "...", "detail": "..."} after choosing N
//   {"op": "search", "query": Q, "mode": M?} -> {"summary": "...", "results": [{"name", "score"}]}
//   {"op": "payload", "preset": P?, "format": F?}
//                                            -> {"figures": "...", "first_tokens": n}
//   {"op": "searches"}                       -> {"rows": [[cell, ...], ...]}
//   {"op": "catalog_timing", "filter": F}    -> {"tools", "load_ms", "filter_ms", "shown"}: the catalog
//                                               view opened (fetch and render), then filtered by F
//   {"op": "keyboard_tabs"}                  -> {"selected": [...]}: the tabs reached with the arrow keys
//   {"op": "screenshot", "name": N}          -> {"file": DIR/N.png}
//   {"op": "kill_pidfile", "path": P}        -> {"killed": pid}
// The output is {"steps": [...]} on stdout.

import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { join } from "node:path";

// Resolved from the working directory: the test peers' node_modules, not this file's folder.
const { chromium } = createRequire(join(process.cwd(), "index.js"))("playwright-core");

const args = Object.fromEntries(
  process.argv.slice(2).reduce((pairs, arg, i, all) => (arg.startsWith("--") ? [...pairs, [arg.slice(2), all[i + 1]]] : pairs), []),
);
const plan = JSON.parse(args.plan);
const shots = args.shots || ".";
const GUARD_MS = 60_000;

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", "--disable-quic"],
});
const out = { steps: [], console_errors: [] };
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  page.setDefaultTimeout(GUARD_MS);
  page.on("pageerror", (e) => out.console_errors.push(String(e)));
  await page.goto(args.url);
  await page.waitForSelector("#upstream-rows tr");

  const tab = (name) => page.click(`#tab-${name}`);
  const rows = () => page.$$eval("#upstream-rows tr", (trs) => trs.map((tr) => ({
    server: tr.dataset.server,
    state: tr.querySelector("[data-state]")?.dataset.state,
    tools: Number(tr.children[3]?.textContent),
  })));

  for (const step of plan) {
    switch (step.op) {
      case "upstreams":
        await tab("upstreams");
        out.steps.push({ rows: await rows() });
        break;
      case "wait_state":
        await tab("upstreams");
        await page.waitForSelector(`#upstream-rows tr[data-server="${step.server}"] [data-state="${step.state}"]`, { timeout: GUARD_MS });
        out.steps.push({ rows: await rows() });
        break;
      case "wait_text": {
        await tab("upstreams");
        const row = `#upstream-rows tr[data-server="${step.server}"]`;
        await page.waitForFunction(([sel, text]) => document.querySelector(sel)?.textContent.includes(text), [row, step.text], { timeout: GUARD_MS });
        out.steps.push({ row: await page.textContent(row) });
        break;
      }
      case "catalog":
        await tab("catalog");
        await page.waitForSelector("#catalog-rows tr[data-tool]");
        await page.click(`#catalog-rows tr[data-tool="${step.tool}"]`);
        await page.waitForSelector("#tool-detail h2");
        out.steps.push({
          count: await page.textContent("#catalog-count"),
          detail: await page.textContent("#tool-detail"),
        });
        break;
      case "search":
        await tab("playground");
        await page.fill("#search-query", step.query);
        if (step.mode) await page.selectOption("#search-mode", step.mode);
        await page.click('#search-form button[type="submit"]');
        await page.waitForSelector("#search-rows tr[data-result]");
        out.steps.push({
          summary: await page.textContent("#search-summary"),
          results: await page.$$eval("#search-rows tr[data-result]", (trs) => trs.map((tr) => ({
            name: tr.dataset.result,
            score: Number(tr.querySelector(".score").textContent),
            highlighted: tr.querySelectorAll("mark").length,
          }))),
        });
        break;
      case "payload":
        await tab("payload");
        if (step.preset) await page.selectOption("#payload-preset", step.preset);
        if (step.format) await page.selectOption("#payload-format", step.format);
        await page.click('#payload-form button[type="submit"]');
        await page.waitForSelector("#payload-first");
        out.steps.push({
          figures: await page.textContent("#payload-figures"),
          first_tokens: Number((await page.textContent("#payload-first")).replace(/[^0-9]/g, "")),
          surface_tokens: Number((await page.textContent("#payload-surface")).replace(/[^0-9]/g, "")),
        });
        break;
      case "searches":
        await tab("searches");
        await page.waitForSelector("#search-log tr td");
        out.steps.push({
          rows: await page.$$eval("#search-log tr", (trs) => trs.map((tr) => [...tr.children].map((td) => td.textContent.trim()))),
        });
        break;
      case "catalog_timing": {
        const started = Date.now();
        await tab("catalog");
        await page.waitForSelector("#catalog-rows tr[data-tool]");
        const loadMs = Date.now() - started;
        const listed = await page.$$eval("#catalog-rows tr[data-tool]", (trs) => trs.length);
        const filterStarted = Date.now();
        await page.fill("#catalog-filter", step.filter);
        await page.waitForFunction((f) => [...document.querySelectorAll("#catalog-rows tr[data-tool]")]
          .every((tr) => tr.textContent.toLowerCase().includes(f)), step.filter.toLowerCase());
        const filterMs = Date.now() - filterStarted;
        out.steps.push({
          tools: listed,
          load_ms: loadMs,
          filter_ms: filterMs,
          shown: await page.textContent("#catalog-count"),
        });
        break;
      }
      case "keyboard_tabs": {
        await page.focus("#tab-upstreams");
        const selected = [];
        for (let i = 0; i < 5; i++) {
          await page.keyboard.press("ArrowRight");
          selected.push(await page.$eval('[role="tab"][aria-selected="true"]', (t) => t.id));
        }
        out.steps.push({ selected });
        break;
      }
      case "screenshot": {
        const file = join(shots, `${step.name}.png`);
        await page.screenshot({ path: file, fullPage: step.full_page ?? false });
        out.steps.push({ file });
        break;
      }
      case "kill_pidfile": {
        const pid = Number(readFileSync(step.path, "utf8").trim());
        process.kill(pid, "SIGKILL");
        out.steps.push({ killed: pid });
        break;
      }
      default:
        throw new Error(`unknown step ${step.op}`);
    }
  }
} catch (e) {
  out.fatal = String(e && e.stack || e);
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
process.exit(out.fatal ? 1 : 0);
