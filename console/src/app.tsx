import { useEffect, useState } from "react";
import { Redirect, Route, Switch } from "wouter";
import { useAuth } from "./auth/session";
import { signIn, takeKeyFromFragment } from "./auth/sign-in";
import { SignInPage } from "./auth/sign-in-page";
import { Shell } from "./layout/shell";
import { PlaceholderPage } from "./pages/placeholder-page";
import { RunPage } from "./pages/run-page";
import { RunsPage } from "./pages/runs-page";
import {
  ApiKeysPage,
  EnvironmentPage,
  EnvironmentsPage,
  ExperimentPage,
  ExperimentsPage,
  InteractionPage,
  InteractionsPage,
  NewExperimentPage,
  NewInteractionPage,
} from "./pages/lazy-pages";

/** The console: sign-in until a session exists, then the pages in the shell. */
export function App() {
  const { session } = useAuth();
  const [fragment, setFragment] = useState<{ pending: boolean; error?: string }>(() => ({
    pending: false,
  }));

  // A sign-in link (`/#key=sk-…`): the key leaves the address bar before anything else happens.
  useEffect(() => {
    const key = takeKeyFromFragment();
    if (!key) return;
    setFragment({ pending: true });
    signIn(key).then(
      () => setFragment({ pending: false }),
      (err: unknown) => setFragment({ pending: false, error: (err as Error).message }),
    );
  }, []);

  if (!session) return <SignInPage pending={fragment.pending} linkError={fragment.error} />;
  return (
    <Shell session={session}>
      <Switch>
        <Route path="/">
          <Redirect to="/runs" replace />
        </Route>
        <Route path="/runs" component={RunsPage} />
        <Route path="/runs/:id">{(params) => <RunPage key={params.id} id={params.id} />}</Route>
        <Route path="/experiments" component={ExperimentsPage} />
        <Route path="/experiments/new" component={NewExperimentPage} />
        <Route path="/experiments/:id">
          {(params) => <ExperimentPage key={params.id} id={params.id} />}
        </Route>
        <Route path="/interactions" component={InteractionsPage} />
        <Route path="/interactions/new" component={NewInteractionPage} />
        <Route path="/interactions/:id/:tab?">
          {(params) => <InteractionPage key={params.id} id={params.id} tab={params.tab} />}
        </Route>
        <Route path="/environments" component={EnvironmentsPage} />
        <Route path="/environments/new">
          <EnvironmentPage />
        </Route>
        <Route path="/environments/:id">
          {(params) => <EnvironmentPage key={params.id} id={params.id} />}
        </Route>
        <Route path="/api-keys" component={ApiKeysPage} />
        <Route>
          <PlaceholderPage title="Not found" text="There is no page at this address." />
        </Route>
      </Switch>
    </Shell>
  );
}
