import { Skeleton } from "@mantine/core";
import { lazy, Suspense, type ComponentProps, type ComponentType } from "react";

/**
 * The pages that edit (CodeMirror, diffs) and the rarer ones, each loaded when first visited: the
 * console's first load carries none of them.
 */
function deferred<P extends object>(load: () => Promise<{ default: ComponentType<P> }>) {
  const Page = lazy(load);
  return function DeferredPage(props: P) {
    return (
      <Suspense fallback={<Skeleton height={32} width="40%" aria-label="Loading the page" />}>
        <Page {...(props as ComponentProps<typeof Page>)} />
      </Suspense>
    );
  };
}

export const InteractionsPage = deferred(() => import("../interactions/interactions-page"));
export const NewInteractionPage = deferred(() => import("../interactions/new-interaction-page"));
export const InteractionPage = deferred(() => import("../interactions/interaction-page"));
export const EnvironmentsPage = deferred(() => import("../environments/environments-page"));
export const EnvironmentPage = deferred(() => import("../environments/environment-page"));
export const ApiKeysPage = deferred(() => import("../api-keys/api-keys-page"));
export const ExperimentsPage = deferred(() => import("../experiments/experiments-page"));
export const NewExperimentPage = deferred(() => import("../experiments/new-experiment-page"));
export const ExperimentPage = deferred(() => import("../experiments/experiment-page"));
