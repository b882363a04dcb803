import { create } from "@bufbuild/protobuf";
import { costOf, priceOf, usd } from "@pies/common";
import type { Environment, RoutedEnvironment } from "@pies/proto/catalog";
import { RunCostSchema, type RunCost } from "@pies/proto/runs";
import { pricesOf } from "./catalog-payloads.js";
import type { TokenUsage } from "./providers/types.js";

/**
 * What a run's provider calls cost (DESIGN.md §7), summed call by call, each at its model's
 * price: the run's environment's `config.prices`, else (a virtual environment's call) the
 * prices of the environment that answered, else the list prices pies ships. A run with a call of
 * a model of no known price has no cost.
 */
export class RunCostSum {
  private input = 0;
  private output = 0;
  private estimated = false;
  private counted = false;
  private unpriced = false;

  constructor(
    private readonly environment: Environment,
    private readonly routes: RoutedEnvironment[] | undefined,
  ) {}

  /**
   * One call's tokens: `estimated` when the tokenizer counted them; `environmentId` the routed
   * environment a virtual one called.
   */
  add(model: string, usage: TokenUsage, estimated: boolean, environmentId?: string): void {
    if (usage.prompt === 0 && usage.result === 0) return;
    this.counted = true;
    const routed = environmentId
      ? this.routes?.find((r) => r.environment?.id === environmentId)?.environment
      : undefined;
    const price =
      pricesOf(this.environment).get(model) ??
      priceOf(model, routed ? pricesOf(routed) : undefined);
    if (!price) {
      this.unpriced = true;
      return;
    }
    const cost = costOf(usage.prompt, usage.result, price);
    this.input += cost.input;
    this.output += cost.output;
    this.estimated ||= estimated;
  }

  /** The run's cost; undefined when it used no tokens or a model of no known price. */
  result(): RunCost | undefined {
    if (!this.counted || this.unpriced) return undefined;
    // Each call's cost is rounded already: the sums only add float noise back, rounded off.
    return create(RunCostSchema, {
      input: usd(this.input),
      output: usd(this.output),
      total: usd(this.input + this.output),
      currency: "USD",
      estimated: this.estimated,
    });
  }
}
