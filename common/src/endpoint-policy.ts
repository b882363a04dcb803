import { lookup as dnsLookup, type LookupAddress, type LookupOptions } from "node:dns";
import { BlockList, isIP } from "node:net";
import { z } from "zod";

/** What kind of address an IP is, for the endpoint policy (DESIGN.md §9). */
export type AddressClass =
  | "public"
  | "loopback"
  | "private"
  | "link_local"
  | "metadata"
  | "unspecified"
  | "multicast"
  | "broadcast"
  | "reserved";

/** The classes an endpoint may name only when configuration allows them. */
const RESTRICTED_CLASSES: readonly Exclude<AddressClass, "public">[] = [
  "loopback",
  "private",
  "link_local",
  "metadata",
  "unspecified",
  "multicast",
  "broadcast",
  "reserved",
];

// Checked in this order: the first class whose ranges hold an address is its class (a metadata
// address is link-local or private too, and says more as metadata; ::1 is loopback although the
// IPv4-compatible form of 0.0.0.0/8 holds it).
const ranges: Array<[Exclude<AddressClass, "public">, string[]]> = [
  [
    "metadata",
    [
      "169.254.169.254/32", // AWS, GCP, Azure, OpenStack, Oracle
      "169.254.170.2/32", // AWS ECS task credentials
      "100.100.100.200/32", // Alibaba Cloud
      "168.63.129.16/32", // Azure wire server
      "fd00:ec2::254/128", // AWS over IPv6
      "fd00:ec2::23/128",
    ],
  ],
  ["loopback", ["127.0.0.0/8", "::1/128"]],
  ["unspecified", ["0.0.0.0/8", "::/128"]],
  ["broadcast", ["255.255.255.255/32"]],
  [
    "private",
    ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7", "fec0::/10"],
  ],
  ["link_local", ["169.254.0.0/16", "fe80::/10"]],
  ["multicast", ["224.0.0.0/4", "ff00::/8"]],
  [
    "reserved",
    [
      "192.0.0.0/24",
      "192.0.2.0/24",
      "198.18.0.0/15",
      "198.51.100.0/24",
      "203.0.113.0/24",
      "240.0.0.0/4",
      "100::/64",
      "2001:db8::/32",
    ],
  ],
];

/**
 * IPv6 forms that carry an IPv4 address a host may end up connecting to: IPv4-mapped
 * (`::ffff:a.b.c.d`, which BlockList already matches), IPv4-compatible (`::a.b.c.d`), NAT64
 * (`64:ff9b::a.b.c.d`) and 6to4 (`2002:AABB:CCDD::`). Each IPv4 range is added in every form.
 */
function addSubnet(list: BlockList, cidr: string) {
  const [network, bits] = cidr.split("/") as [string, string];
  const prefix = Number(bits);
  if (isIP(network) === 6) {
    list.addSubnet(network, prefix, "ipv6");
    return;
  }
  list.addSubnet(network, prefix, "ipv4");
  list.addSubnet(`::${network}`, 96 + prefix, "ipv6");
  list.addSubnet(`64:ff9b::${network}`, 96 + prefix, "ipv6");
  const [a, b, c, d] = network.split(".").map(Number) as [number, number, number, number];
  const hex = (x: number, y: number) => ((x << 8) | y).toString(16);
  list.addSubnet(`2002:${hex(a, b)}:${hex(c, d)}::`, 16 + prefix, "ipv6");
}

const classLists = ranges.map(([cls, cidrs]) => {
  const list = new BlockList();
  for (const cidr of cidrs) addSubnet(list, cidr);
  return [cls, list] as const;
});

/** An IP literal without the brackets of a URL's IPv6 host, or undefined when it is not one. */
function ipLiteral(host: string): string | undefined {
  const bare = host.startsWith("[") && host.endsWith("]") ? host.slice(1, -1) : host;
  return isIP(bare) ? bare : undefined;
}

/**
 * The class of an IP address (IPv4, IPv6, bracketed IPv6). Anything that is not an IP literal is
 * `reserved`: a caller must resolve names first.
 */
export function classifyAddress(address: string): AddressClass {
  const ip = ipLiteral(address);
  if (!ip) return "reserved";
  const family = isIP(ip) === 4 ? "ipv4" : "ipv6";
  for (const [cls, list] of classLists) if (list.check(ip, family)) return cls;
  return "public";
}

/** Host names that reach a cloud's instance metadata service however they resolve. */
const METADATA_NAMES = new Set([
  "metadata",
  "metadata.google.internal",
  "metadata.goog",
  "metadata.azure.com",
  "instance-data",
  "instance-data.ec2.internal",
]);

/** A host name as compared: lower case, no trailing dots, no IPv6 brackets. */
function normalizeHost(host: string): string {
  const lower = host.toLowerCase().replace(/\.+$/, "");
  return lower.startsWith("[") && lower.endsWith("]") ? lower.slice(1, -1) : lower;
}

/** The class a host name has by its text alone (RFC 6761 `localhost`, metadata names). */
function classifyName(host: string): AddressClass {
  if (host === "localhost" || host.endsWith(".localhost")) return "loopback";
  if (METADATA_NAMES.has(host)) return "metadata";
  return "public";
}

/** An endpoint the policy refuses; `message` names the reason, never a resolved address. */
export class EndpointRefusedError extends Error {
  readonly code = "ENDPOINT_REFUSED";
  constructor(
    message: string,
    readonly addressClass: AddressClass,
  ) {
    super(message);
    this.name = "EndpointRefusedError";
  }
}

const article = (cls: AddressClass) => (cls === "unspecified" ? "an" : "a");
const describe = (cls: AddressClass) => `${article(cls)} ${cls.replace("_", "-")} address`;

type Resolve = (host: string) => Promise<LookupAddress[]>;

const systemResolve: Resolve = (host) =>
  new Promise((resolve, reject) =>
    dnsLookup(host, { all: true, verbatim: true }, (err, addresses) =>
      err ? reject(err) : resolve(addresses),
    ),
  );

/**
 * Where provider requests may go (DESIGN.md §9). Public addresses always; loopback, private,
 * link-local, metadata, unspecified, multicast, broadcast and reserved ones only when an entry of
 * the allow list names them: a host name (exact, and then whatever it resolves to), an IP address,
 * a CIDR, or a class keyword (`loopback`, `private`, …).
 *
 * The same rules apply to a URL's text, to the addresses its host resolves to when an environment
 * is saved, and to every address a connection is about to use ({@link lookup}), so a name that
 * resolves to a public address when checked and to a private one when used is still refused.
 */
export class EndpointPolicy {
  private readonly hosts = new Set<string>();
  private readonly classes = new Set<AddressClass>();
  private readonly addresses = new BlockList();
  private readonly resolve: Resolve;

  /**
   * @param allowed entries of the allow list (`PIES_ALLOWED_ENDPOINTS`, comma-separated);
   * throws on an entry that is no host name, IP, CIDR or class.
   */
  constructor(allowed: string | readonly string[] = [], options: { resolve?: Resolve } = {}) {
    const entries = typeof allowed === "string" ? allowed.split(",") : allowed;
    for (const raw of entries) {
      const entry = raw.trim();
      if (entry) this.allow(entry);
    }
    this.resolve = options.resolve ?? systemResolve;
  }

  private allow(entry: string) {
    const lower = entry.toLowerCase();
    if ((RESTRICTED_CLASSES as readonly string[]).includes(lower)) {
      this.classes.add(lower as AddressClass);
      return;
    }
    // split always yields a first part (the whole entry when there is no slash).
    const [network = entry, bits, extra] = entry.split("/");
    const ip = ipLiteral(network);
    if (ip) {
      const family = isIP(ip) === 4 ? "ipv4" : "ipv6";
      const max = family === "ipv4" ? 32 : 128;
      const prefix = bits === undefined ? max : Number(bits);
      if (extra !== undefined || !/^\d+$/.test(bits ?? String(max)) || prefix > max) {
        throw new Error(`PIES_ALLOWED_ENDPOINTS: ${entry} is not a valid CIDR`);
      }
      this.addresses.addSubnet(ip, prefix, family);
      if (family === "ipv4") this.addresses.addSubnet(`::ffff:${ip}`, 96 + prefix, "ipv6");
      return;
    }
    if (bits !== undefined || !/^[a-z0-9]([a-z0-9_.-]*[a-z0-9])?\.?$/i.test(entry)) {
      throw new Error(
        `PIES_ALLOWED_ENDPOINTS: ${entry} is not a host name, an IP address, a CIDR or one of ${RESTRICTED_CLASSES.join(", ")}`,
      );
    }
    this.hosts.add(normalizeHost(entry));
  }

  /** Whether a host name (as in a URL) is allowed by name, whatever it resolves to. */
  private hostAllowed(host: string): boolean {
    return this.hosts.has(normalizeHost(host));
  }

  /** Why an IP address may not be used, or undefined when it may. */
  addressRefusal(address: string): AddressClass | undefined {
    const ip = ipLiteral(address);
    if (!ip) return "reserved";
    const cls = classifyAddress(ip);
    if (cls === "public" || this.classes.has(cls)) return undefined;
    if (this.addresses.check(ip, isIP(ip) === 4 ? "ipv4" : "ipv6")) return undefined;
    return cls;
  }

  /**
   * Checks a host and the addresses it resolved to; throws {@link EndpointRefusedError} when one
   * of them is refused (any one: a connection may use any of them).
   */
  checkAddresses(host: string, addresses: readonly string[]) {
    const name = normalizeHost(host);
    if (this.hostAllowed(name)) return;
    const literal = ipLiteral(name);
    if (!literal) {
      const byName = classifyName(name);
      if (byName !== "public" && !this.classes.has(byName)) throw refused(name, byName, false);
    }
    for (const address of addresses) {
      const cls = this.addressRefusal(address);
      if (cls) throw refused(name, cls, !literal);
    }
  }

  /**
   * Checks an endpoint URL: its scheme, its host as written and, for a name, every address it
   * resolves to now. A name that does not resolve (yet) passes: the check at connection time
   * still applies. Throws {@link EndpointRefusedError}, also for what is no http(s) URL.
   */
  async checkUrl(text: string, timeoutMs = 2000): Promise<void> {
    let url: URL;
    try {
      url = new URL(text);
    } catch {
      throw new EndpointRefusedError("not a URL", "reserved");
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      throw new EndpointRefusedError("not an http or https URL", "reserved");
    }
    // WHATWG parsing has already turned `127.1`, `0x7f000001` and `2130706433` into 127.0.0.1.
    const host = normalizeHost(url.hostname);
    if (!host) throw new EndpointRefusedError("no host", "reserved");
    if (this.hostAllowed(host)) return;
    if (ipLiteral(host)) return this.checkAddresses(host, [host]);
    this.checkAddresses(host, []);
    const addresses = await this.resolveWithin(host, timeoutMs);
    this.checkAddresses(
      host,
      addresses.map((a) => a.address),
    );
  }

  private async resolveWithin(host: string, timeoutMs: number): Promise<LookupAddress[]> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<LookupAddress[]>((resolve) => {
      timer = setTimeout(() => resolve([]), timeoutMs);
    });
    try {
      return await Promise.race([this.resolve(host).catch(() => []), timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * A `lookup` for `net.connect`/`tls.connect` (and so undici's connector): resolves as the
   * system does, then refuses the connection unless the policy allows every address found.
   * `net.connect` does not call it for an IP literal: check those with {@link checkAddresses}.
   */
  readonly lookup = (
    hostname: string,
    options: LookupOptions,
    callback: (
      err: NodeJS.ErrnoException | null,
      address: string | LookupAddress[],
      family?: number,
    ) => void,
  ): void => {
    this.resolve(hostname).then(
      (all) => {
        const addresses = options.family ? all.filter((a) => a.family === options.family) : all;
        try {
          this.checkAddresses(
            hostname,
            addresses.map((a) => a.address),
          );
        } catch (refusal) {
          return callback(refusal as NodeJS.ErrnoException, []);
        }
        const first = addresses[0];
        if (!first) {
          const err = Object.assign(new Error(`no address for ${hostname}`), { code: "ENOTFOUND" });
          return callback(err, []);
        }
        if (options.all) callback(null, addresses);
        else callback(null, first.address, first.family);
      },
      (err: NodeJS.ErrnoException) => callback(err, []),
    );
  };
}

function refused(host: string, cls: AddressClass, resolved: boolean): EndpointRefusedError {
  const what = resolved
    ? `the host ${host} resolves to ${describe(cls)}`
    : `${host} is ${describe(cls)}`;
  return new EndpointRefusedError(
    `${what}, which the endpoint policy refuses (allow it with PIES_ALLOWED_ENDPOINTS)`,
    cls,
  );
}

/**
 * `PIES_ALLOWED_ENDPOINTS` as a configuration field: a comma-separated allow list, checked when
 * the configuration is loaded. `fallback` is the mode's default (empty deployed, `loopback`
 * embedded).
 */
export const allowedEndpointsSetting = (fallback: string) =>
  z
    .string()
    .default(fallback)
    .superRefine((value, ctx) => {
      try {
        new EndpointPolicy(value);
      } catch (err) {
        ctx.addIssue({ code: z.ZodIssueCode.custom, message: (err as Error).message });
      }
    });
