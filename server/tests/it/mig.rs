//! MIG slices over the API with a real agent (in-process, a simulated H100 cut into
//! 3g.40gb + 2g.20gb + 1g.10gb ×2), on SQLite and PostgreSQL: the provider sells the GPU as
//! slices and prices each profile, a renter finds a 1g.10gb slice, books it, it runs in the
//! sandbox on GPU 0 seeing only its slice's `MIG-…` UUID, and is billed at the slice price to the
//! second; the GPU cannot be sold whole meanwhile. The provider also re-carves the GPU through
//! the agent: never under a rental, and the new slices go on sale once the agent reports them.

use crate::common::{TestApp, agent_dir, eventually};
use cardpool_service::{Settings, backend_tests, hosts, rentals, testing::Backend};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::time::Duration;

const LAYOUT: &str = "1xH100-80GB:mig=3g.40gb+2g.20gb+1g.10gb*2";
const SLICE: &str = "NVIDIA H100 80GB HBM3 MIG 1g.10gb";

async fn a_renter_rents_a_1g_slice_over_the_api(backend: Backend) {
    use cardpool_agent::{connection, gpu::simulated::SimulatedSource, runtime::WorkloadMode};
    let app = TestApp::spawn_with(backend, Settings::default()).await;
    let provider = app.provider("provider@example.com").await;
    let token = app.enrollment_token(&provider, "Lab").await;
    let state = cardpool_agent::enrollment::enroll(&app.base, &token, "cut").await.unwrap();
    let host_id = state.host_id;
    let dir = agent_dir("mig");
    let rentals_dir = dir.clone();
    let agent = tokio::spawn(async move {
        let source = SimulatedSource::new(LAYOUT, "cut", vec![]).unwrap();
        connection::run(&state, &source, None, dir, WorkloadMode::Run, Duration::from_secs(1)).await
    });
    let owner = cardpool_service::accounts::principal_for_email(&app.services, "provider@example.com").await.unwrap();
    eventually(Duration::from_secs(10), "the MIG layout arriving", async || {
        let detail = hosts::get_host(&app.services, &owner, host_id).await.unwrap();
        detail.gpus.first().is_some_and(|g| g.mig_instances.len() == 4).then_some(())
    })
    .await;

    // The provider sells GPU 0 as slices (a bad choice is a 422 that changes nothing).
    let sale = |body: Value| provider.put(app.url(&format!("/api/v1/hosts/{host_id}/gpu-sale"))).json(&body).send();
    assert_eq!(
        sale(json!({"gpu_index": 0, "sold_as": "half"})).await.unwrap().status(),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(sale(json!({"gpu_index": 7, "sold_as": "mig"})).await.unwrap().status(), StatusCode::NOT_FOUND);
    assert_eq!(sale(json!({"gpu_index": 0, "sold_as": "mig"})).await.unwrap().status(), StatusCode::NO_CONTENT);
    let detail = app.get_json(&provider, &format!("/api/v1/hosts/{host_id}")).await;
    assert_eq!(detail["gpus"][0]["sold_as"], "mig");
    for (profile, micros) in [("1g.10gb", 390_000), ("2g.20gb", 750_000), ("3g.40gb", 1_100_000)] {
        let price = json!({
            "gpu_model": format!("NVIDIA H100 80GB HBM3 MIG {profile}"),
            "on_demand_micros": micros, "reserved_micros": micros, "spot_min_bid_micros": 100_000
        });
        let res = provider.put(app.url(&format!("/api/v1/hosts/{host_id}/pricing"))).json(&price).send().await.unwrap();
        assert_eq!(res.status(), StatusCode::OK, "{profile}");
    }
    let res = provider
        .put(app.url(&format!("/api/v1/hosts/{host_id}/listing")))
        .json(&json!({"listed": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::NO_CONTENT);

    // The renter's search finds the two 1g.10gb slices; asking for whole GPUs finds none.
    let renter = app.funded_renter("renter@example.com", 10).await;
    let found = app.get_json(&renter, "/api/v1/offers?unit=slice&mig_profile=1g.10gb").await;
    assert_eq!(found["total"], 1, "{found}");
    let offer = &found["offers"][0];
    assert_eq!((offer["gpu_model"].as_str(), offer["mig_profile"].as_str()), (Some(SLICE), Some("1g.10gb")));
    assert_eq!((offer["gpus_free"].as_u64(), offer["vram_bytes"].as_u64()), (Some(2), Some(10 << 30)));
    assert_eq!(app.get_json(&renter, "/api/v1/offers?unit=gpu").await["total"], 0);
    let bad = renter.get(app.url("/api/v1/offers?unit=half")).send().await.unwrap();
    assert!(bad.status().is_client_error(), "{}", bad.status());

    let res = renter
        .post(app.url("/api/v1/rentals"))
        .json(&json!({"host_id": host_id, "gpu_model": SLICE, "gpu_count": 1,
            "workload": {"command": "echo \"gpus=$CUDA_VISIBLE_DEVICES\"; exec sleep 600"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::CREATED);
    let booked: Value = res.json().await.unwrap();
    let id = booked["id"].as_i64().unwrap();
    assert_eq!((booked["gpu_model"].as_str(), booked["gpu_indexes"].clone()), (Some(SLICE), json!([0])));
    app.wait_for_rental_state(&renter, id, "running", Duration::from_secs(10)).await;
    // The workload sees one device: its slice, by the UUID the agent reported for it.
    let slice = detail["gpus"][0]["mig_instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["profile"] == "1g.10gb")
        .and_then(|m| m["uuid"].as_str())
        .unwrap()
        .to_owned();
    let log = eventually(Duration::from_secs(10), "the workload's first line", async || {
        std::fs::read_to_string(rentals_dir.join(format!("{id}/workload.log"))).ok().filter(|l| l.contains("gpus="))
    })
    .await;
    assert_eq!(log.lines().find(|l| l.starts_with("gpus=")), Some(format!("gpus={slice}").as_str()), "{log}");
    let left = app.get_json(&renter, "/api/v1/offers?unit=slice&mig_profile=1g.10gb").await;
    assert_eq!(left["offers"][0]["gpus_free"], 1);
    // Rented: the GPU is not re-cut under its renter.
    assert_eq!(sale(json!({"gpu_index": 0, "sold_as": "whole"})).await.unwrap().status(), StatusCode::CONFLICT);

    tokio::time::sleep(Duration::from_millis(2100)).await;
    let res = renter.post(app.url(&format!("/api/v1/rentals/{id}/stop"))).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let ended = app.wait_for_rental_state(&renter, id, "ended", Duration::from_secs(15)).await;
    let billed = ended["rental"]["billed_seconds"].as_i64().unwrap();
    assert!(billed >= 2, "{ended}");
    assert_eq!(ended["rental"]["charged_micros"].as_i64().unwrap(), rentals::cost(390_000, 1, billed));
    assert_eq!(sale(json!({"gpu_index": 0, "sold_as": "whole"})).await.unwrap().status(), StatusCode::NO_CONTENT);
    agent.abort();
}

async fn a_provider_recarves_a_gpu_through_its_agent_over_the_api(backend: Backend) {
    use cardpool_agent::{connection, gpu::simulated::SimulatedSource, runtime::WorkloadMode};
    let app = TestApp::spawn_with(backend, Settings::default()).await;
    let provider = app.provider("provider@example.com").await;
    let token = app.enrollment_token(&provider, "Lab").await;
    let state = cardpool_agent::enrollment::enroll(&app.base, &token, "recut").await.unwrap();
    let host_id = state.host_id;
    let dir = agent_dir("mig-recut");
    let agent = tokio::spawn(async move {
        let source = SimulatedSource::new(LAYOUT, "recut", vec![]).unwrap();
        connection::run(&state, &source, None, dir, WorkloadMode::Run, Duration::from_secs(1)).await
    });
    let host_path = format!("/api/v1/hosts/{host_id}");
    let profiles_of = |detail: &Value| -> Vec<String> {
        let mut names: Vec<String> = detail["gpus"][0]["mig_instances"]
            .as_array()
            .map(|a| a.iter().filter_map(|m| m["profile"].as_str().map(str::to_owned)).collect())
            .unwrap_or_default();
        names.sort();
        names
    };
    let detail = eventually(Duration::from_secs(10), "the agent's MIG profiles", async || {
        let detail = app.get_json(&provider, &host_path).await;
        (detail["gpus"][0]["mig_profiles"].as_array().is_some_and(|p| p.len() == 6)).then_some(detail)
    })
    .await;
    assert_eq!(profiles_of(&detail), ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]);

    // A layout that does not fit, or names no profile of the GPU, is a 422 that changes nothing.
    let carve = |profiles: Value| {
        provider
            .put(app.url(&format!("{host_path}/mig-layout")))
            .json(&json!({"gpu_index": 0, "profiles": profiles}))
            .send()
    };
    let too_big = carve(json!(["7g.80gb", "1g.10gb"])).await.unwrap();
    assert_eq!(too_big.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(too_big.text().await.unwrap().contains("8 compute slices"));
    assert_eq!(carve(json!(["9g.90gb"])).await.unwrap().status(), StatusCode::UNPROCESSABLE_ENTITY);

    // Seven 1g.10gb slices: the agent carves them and they are sold once priced.
    assert_eq!(carve(json!(vec!["1g.10gb"; 7])).await.unwrap().status(), StatusCode::NO_CONTENT);
    let detail = eventually(Duration::from_secs(10), "the agent carving seven slices", async || {
        let detail = app.get_json(&provider, &host_path).await;
        (detail["gpus"][0]["mig_layout_pending"].is_null() && profiles_of(&detail).len() == 7).then_some(detail)
    })
    .await;
    assert_eq!(detail["gpus"][0]["state"], "available");
    assert!(detail["gpus"][0]["mig_layout_error"].is_null());
    let sale = provider.put(app.url(&format!("{host_path}/gpu-sale"))).json(&json!({"gpu_index": 0, "sold_as": "mig"}));
    assert_eq!(sale.send().await.unwrap().status(), StatusCode::NO_CONTENT);
    let price = json!({"gpu_model": SLICE, "on_demand_micros": 390_000, "reserved_micros": 390_000, "spot_min_bid_micros": 100_000});
    let res = provider.put(app.url(&format!("{host_path}/pricing"))).json(&price).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let listed = provider.put(app.url(&format!("{host_path}/listing"))).json(&json!({"listed": true}));
    assert_eq!(listed.send().await.unwrap().status(), StatusCode::NO_CONTENT);
    let renter = app.funded_renter("renter@example.com", 10).await;
    let found = app.get_json(&renter, "/api/v1/offers?unit=slice&mig_profile=1g.10gb").await;
    assert_eq!(found["offers"][0]["gpus_free"], 7, "{found}");

    // Rented: the GPU is not re-cut under its renter.
    let res = renter
        .post(app.url("/api/v1/rentals"))
        .json(
            &json!({"host_id": host_id, "gpu_model": SLICE, "gpu_count": 1, "workload": {"command": "exec sleep 600"}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::CREATED);
    let id = res.json::<Value>().await.unwrap()["id"].as_i64().unwrap();
    app.wait_for_rental_state(&renter, id, "running", Duration::from_secs(10)).await;
    assert_eq!(carve(json!(["3g.40gb", "3g.40gb"])).await.unwrap().status(), StatusCode::CONFLICT);
    let res = renter.post(app.url(&format!("/api/v1/rentals/{id}/stop"))).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    app.wait_for_rental_state(&renter, id, "ended", Duration::from_secs(15)).await;

    // Ended: two 3g.40gb slices replace the seven, and no 1g.10gb slice is left on offer.
    assert_eq!(carve(json!(["3g.40gb", "3g.40gb"])).await.unwrap().status(), StatusCode::NO_CONTENT);
    eventually(Duration::from_secs(10), "the agent carving two slices", async || {
        let detail = app.get_json(&provider, &host_path).await;
        (detail["gpus"][0]["mig_layout_pending"].is_null() && profiles_of(&detail) == ["3g.40gb", "3g.40gb"])
            .then_some(())
    })
    .await;
    assert_eq!(app.get_json(&renter, "/api/v1/offers?unit=slice&mig_profile=1g.10gb").await["total"], 0);
    agent.abort();
}

backend_tests!(a_renter_rents_a_1g_slice_over_the_api, a_provider_recarves_a_gpu_through_its_agent_over_the_api);
