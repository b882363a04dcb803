import { existsSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import path from "node:path";
import { chromium, type BrowserContext, type Page } from "playwright-core";
import { repoRoot } from "@pies/testkit";

/** Debian's Chromium (.ci/run installs it); playwright-core brings no browser of its own. */
export const CHROMIUM = process.env.PIES_CHROMIUM ?? "/usr/bin/chromium";

/** Where the browser tests' screenshots go (git-ignored). */
export const SCREENSHOTS = path.join(repoRoot, "test-results/console");

export interface PageOptions {
  width?: number;
  height?: number;
  /**
   * HTTP statuses the test makes the console meet on purpose (a wrong key's 401, a bad query's
   * 400): Chromium logs each as a console error, which is then no problem.
   */
  expectStatuses?: number[];
}

export interface Browser {
  /**
   * A new tab of a fresh context (its own sessionStorage), recording every console error, page
   * error and CSP violation of the page into `problems`.
   */
  page(options?: PageOptions): Promise<Page>;
  /** What went wrong in any page so far: a test ends by expecting it empty. */
  problems: string[];
  screenshot(page: Page, name: string): Promise<void>;
  close(): Promise<void>;
}

/**
 * Headless Chromium (a new, empty profile in a temporary directory: Playwright's own launch) with
 * nothing that reaches out (the network is closed here; a browser that
 * tried would slow down and log errors).
 */
export async function launchBrowser(): Promise<Browser> {
  if (!existsSync(CHROMIUM)) {
    throw new Error(
      `no Chromium at ${CHROMIUM}: apt-get install chromium (as .ci/run does), or set PIES_CHROMIUM`,
    );
  }
  await mkdir(SCREENSHOTS, { recursive: true });
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  const contexts: BrowserContext[] = [];
  const problems: string[] = [];
  return {
    problems,
    async page({ width = 1280, height = 860, expectStatuses = [] } = {}) {
      const context = await browser.newContext({ viewport: { width, height } });
      contexts.push(context);
      const page = await context.newPage();
      // A CSP violation is also a console error in Chromium; the event names the directive.
      // (The script runs in the page; tests are type-checked without the DOM's types.)
      await page.addInitScript(() => {
        (globalThis as any).document.addEventListener("securitypolicyviolation", (event: any) => {
          console.error(`CSP violation: ${event.violatedDirective} ${event.blockedURI}`);
        });
      });
      page.on("console", (message) => {
        if (message.type() !== "error") return;
        const status = /status of (\d{3})/.exec(message.text())?.[1];
        if (status && expectStatuses.includes(Number(status))) return;
        problems.push(`console: ${message.text()}`);
      });
      page.on("pageerror", (error) => problems.push(`page error: ${error.message}`));
      return page;
    },
    async screenshot(page, name) {
      await page.screenshot({ path: path.join(SCREENSHOTS, `${name}.png`), fullPage: true });
    },
    async close() {
      for (const context of contexts) await context.close().catch(() => {});
      await browser.close();
    },
  };
}
