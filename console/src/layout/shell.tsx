import { AppShell, Badge, Burger, Button, Group, NavLink, Stack, Text, Title } from "@mantine/core";
import { useDisclosure } from "@mantine/hooks";
import { useEffect, type ReactNode } from "react";
import { Link, useLocation } from "wouter";
import { api } from "../api/client";
import { endSession, type Session } from "../auth/session";

interface NavItem {
  href: string;
  label: string;
  adminOnly?: boolean;
}

const NAV: NavItem[] = [
  { href: "/runs", label: "Runs" },
  { href: "/experiments", label: "Experiments" },
  { href: "/interactions", label: "Interactions" },
  { href: "/environments", label: "Environments" },
  { href: "/api-keys", label: "API keys", adminOnly: true },
];

/** The frame of every page: a header with the project and key, navigation, and the page. */
export function Shell({ session, children }: { session: Session; children: ReactNode }) {
  const [opened, { toggle, close }] = useDisclosure(false);
  const [location] = useLocation();
  // A session restored from sessionStorage is checked at once: a token that is no longer good
  // (its key revoked) ends it here, not on the first page that loads something.
  useEffect(() => {
    void api.GET("/api/v1/account");
  }, [session.token]);
  const items = NAV.filter((item) => !item.adminOnly || session.role === "admin");
  return (
    <AppShell
      header={{ height: 56 }}
      navbar={{ width: 220, breakpoint: "sm", collapsed: { mobile: !opened } }}
      padding="md"
    >
      <AppShell.Header>
        <a href="#main" className="skip-link">
          Skip to content
        </a>
        <Group h="100%" px="md" justify="space-between" wrap="nowrap">
          <Group gap="sm" wrap="nowrap">
            <Burger
              opened={opened}
              onClick={toggle}
              hiddenFrom="sm"
              size="sm"
              aria-label={opened ? "Close navigation" : "Open navigation"}
            />
            <Title order={2} size="h4">
              <Link href="/runs" className="brand-link">
                pies
              </Link>
            </Title>
          </Group>
          <Group gap="xs" wrap="nowrap">
            <Text size="sm" visibleFrom="xs" truncate maw={200} title={session.project}>
              {session.project}
            </Text>
            <Badge
              variant="light"
              color={session.role === "admin" ? "grape" : "gray"}
              data-testid="role"
              title={`Key ${session.keyName || "(unnamed)"}`}
            >
              {session.role}
            </Badge>
            <Button variant="subtle" size="xs" onClick={() => endSession()}>
              Sign out
            </Button>
          </Group>
        </Group>
      </AppShell.Header>
      <AppShell.Navbar p="xs" component="nav" aria-label="Main">
        <Stack gap={2}>
          {items.map((item) => (
            <NavLink
              key={item.href}
              component={Link}
              href={item.href}
              label={item.label}
              active={location === item.href || location.startsWith(`${item.href}/`)}
              aria-current={location === item.href ? "page" : undefined}
              onClick={close}
            />
          ))}
        </Stack>
      </AppShell.Navbar>
      <AppShell.Main id="main" tabIndex={-1}>
        {children}
      </AppShell.Main>
    </AppShell>
  );
}
