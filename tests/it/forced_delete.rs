//! A semaphore force-deleted under the recipe that holds it: the server tells its owners
//! nothing, so the holding session watches its semaphore and fires the lease's token as soon
//! as the delete is reported (or, after a reattach, as soon as a describe shows the
//! ownership gone).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::{Env, within};
use ydb_coordination::{ErrorKind, Session, recipes::MembershipState};

/// Less than one keepalive interval (the default session timeout's fifth, 2 s): what these
/// tests wait for is driven by the server's notification, not by a periodic check.
const SOON: Duration = Duration::from_secs(1);

/// Another session force-deletes the semaphore `name` and makes it anew with `limit` (the
/// holder's own retry may have made it first).
async fn remake(admin: &Session, name: &str, limit: u64) {
    within(admin.delete_semaphore(name, true)).await.unwrap();
    match within(admin.create_semaphore(name, limit, b"")).await {
        Ok(()) => {}
        Err(e) => assert_eq!(e.kind(), ErrorKind::AlreadyExists, "{e}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_member_of_a_force_deleted_group_leaves_joined_and_joins_the_new_group() {
    let env = Env::new().await;
    let member = env.session().await;
    let admin = env.session().await;
    let membership = within(member.group("workers").join(b"m")).await.unwrap();
    let MembershipState::Joined {
        order_id: first, ..
    } = membership.state()
    else {
        panic!("joined, yet the state is {:?}", membership.state());
    };
    let mut changes = membership.state_changes();

    within(admin.delete_semaphore("workers", true))
        .await
        .unwrap();
    // The admin makes the group anew; the member's own rejoin may have made it first.
    match within(admin.create_semaphore("workers", u64::MAX, b"")).await {
        Ok(()) => {}
        Err(e) => assert_eq!(e.kind(), ErrorKind::AlreadyExists, "{e}"),
    }

    let left = tokio::time::timeout(
        SOON,
        changes.wait_for(
            |s| !matches!(s, MembershipState::Joined { order_id, .. } if *order_id == first),
        ),
    )
    .await
    .is_ok();
    assert!(
        left,
        "the membership stayed Joined in a group that no longer has it"
    );
    let rejoined =
        within(changes.wait_for(
            |s| matches!(s, MembershipState::Joined { order_id, .. } if *order_id > first),
        ))
        .await
        .unwrap()
        .clone();
    let MembershipState::Joined { session_id, .. } = rejoined else {
        unreachable!()
    };
    assert_eq!(session_id, member.id());
    let members = within(admin.group("workers").members()).await.unwrap();
    let sessions: Vec<u64> = members.iter().map(|m| m.session_id).collect();
    assert_eq!(sessions, [member.id()], "the member is in the new group");
}

#[tokio::test(start_paused = true)]
async fn a_leader_whose_semaphore_is_force_deleted_and_remade_loses_before_the_next_can_act() {
    let env = Env::new().await;
    let a = env.session().await;
    let b = env.session().await;
    let admin = env.session().await;
    let leadership = within(a.election("leader").campaign(b"a")).await.unwrap();
    let token = leadership.token();

    remake(&admin, "leader", 1).await;
    let next = within(b.election("leader").campaign(b"b")).await.unwrap();
    assert!(next.fencing_token() > leadership.fencing_token());

    // The delete's notice went out on A's stream before anything A asks afterwards is
    // answered, so one round trip of A's is enough to be sure it was seen (B's grant and
    // A's notice travel on different streams: nothing orders them).
    within(a.describe_semaphore("leader", Default::default()))
        .await
        .unwrap();
    assert!(token.is_cancelled(), "A still leads after B was granted");
    assert!(leadership.is_lost());
    assert!(!next.is_lost());
    // A's lease is already gone on the server: resigning says so, and breaks nothing.
    assert!(!within(leadership.resign()).await.unwrap());
    let leader = within(a.election("leader").leader())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(leader.session_id, b.id());
}

#[tokio::test(start_paused = true)]
async fn a_held_semaphore_deleted_while_the_stream_was_down_is_noticed_on_reattach() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let (proxy, a) = env.session_behind_proxy().await;
    let admin = env.session().await;
    let leadership = within(a.election("leader").campaign(b"a")).await.unwrap();

    // A's stream stalls; the delete's notice is held back, then lost with the connection.
    proxy.net().stall();
    remake(&admin, "leader", 1).await;
    proxy.net().cut();
    proxy.net().resume();

    // Well before the session's own deadline (timeout minus margin, 9 s) could fire it.
    let fired = tokio::time::timeout(Duration::from_secs(5), leadership.cancelled()).await;
    assert!(
        fired.is_ok(),
        "the lost leadership was not noticed on reattach"
    );
    assert!(!a.token().is_cancelled(), "the session itself lives on");
}

#[tokio::test(start_paused = true)]
async fn a_permit_of_a_force_deleted_semaphore_is_lost() {
    let env = Env::new().await;
    let holder = env.session().await;
    let admin = env.session().await;
    let permit = within(holder.semaphore("api", 5).acquire(2)).await.unwrap();
    assert!(!permit.is_lost());

    remake(&admin, "api", 5).await;

    let lost = tokio::time::timeout(SOON, permit.cancelled()).await.is_ok();
    assert!(
        lost,
        "the permit stayed live on a semaphore that no longer has it"
    );
    assert!(
        !holder.state().is_terminal(),
        "only the permit ends, not its session"
    );
    // The re-created semaphore is whole again: all five tokens can be had.
    let all = within(admin.semaphore("api", 5).try_acquire(5))
        .await
        .unwrap();
    assert!(all.is_some());
}

#[tokio::test(start_paused = true)]
async fn a_leader_proclaiming_while_its_semaphore_is_remade_does_not_keep_the_new_one() {
    let env = Env::new().await;
    if !env.emulated() {
        return;
    }
    let (proxy, a) = env.session_behind_proxy().await;
    let b = env.session().await;
    let admin = env.session().await;
    let leadership = within(a.election("leader").campaign(b"a")).await.unwrap();
    // The guard's watch is armed and described before anything else happens.
    within(a.describe_semaphore("leader", Default::default()))
        .await
        .unwrap();

    // A's proclaim (an owner-data re-acquire) reaches the server after the semaphore was
    // deleted and made anew, so it takes the new one; the delete's notice reaches A first.
    proxy.net().stall();
    let proclaim = tokio::spawn(async move {
        let result = leadership.set_data(b"a2").await;
        (leadership, result)
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    within(admin.delete_semaphore("leader", true))
        .await
        .unwrap();
    within(admin.create_semaphore("leader", 1, b""))
        .await
        .unwrap();
    proxy.net().resume();
    let (leadership, result) = within(proclaim).await.unwrap();
    assert_eq!(result.unwrap_err().kind(), ErrorKind::Aborted);
    assert!(leadership.is_lost());

    // A gave the new semaphore back: the next candidate is not blocked by a session that
    // no longer leads.
    let next = tokio::time::timeout(SOON, b.election("leader").campaign(b"b"))
        .await
        .expect("A's session kept the re-made election semaphore")
        .unwrap();
    assert_eq!(next.lease().unwrap().session_id(), b.id());
    assert!(!a.token().is_cancelled(), "the session itself lives on");
}

#[tokio::test(start_paused = true)]
async fn a_permit_queued_in_the_same_session_is_granted_after_a_force_delete() {
    let env = Env::new().await;
    let holder = env.session().await;
    let admin = env.session().await;
    let first = within(holder.semaphore("api", 5).acquire(2)).await.unwrap();
    let second = tokio::spawn({
        let holder = holder.clone();
        async move { holder.semaphore("api", 5).acquire(2).await }
    });
    // The second waits in the session, behind the first lease of the same name.
    within(async {
        while !holder
            .snapshot()
            .await
            .waiting
            .iter()
            .any(|w| w.name == "api")
        {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;

    // Deleted and not made anew: the second acquire, started by the end of the first
    // lease, meets no semaphore at all, the case a remake by another session races with.
    within(admin.delete_semaphore("api", true)).await.unwrap();
    within(first.cancelled()).await;
    let second = within(second).await.unwrap();
    let permit = second.expect("the recipe makes its semaphore again and acquires it");
    assert!(!permit.is_lost());
    let d = within(admin.describe_semaphore("api", Default::default()))
        .await
        .unwrap();
    assert_eq!((d.limit, d.count), (5, 2));
}
